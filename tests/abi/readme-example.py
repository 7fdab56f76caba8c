#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write the first ```c block of README.md's "Using it" section to OUTPUT, so the build
compiles the README's example and the abi suite runs it. Usage: readme-example.py README OUTPUT"""
import re
import sys

text = open(sys.argv[1]).read()
section = text.split("## Using it", 1)
m = re.search(r"```c\n(.*?)```", section[1] if len(section) == 2 else "", re.S)
if not m:
    sys.exit("README.md: no ```c block under '## Using it'")
with open(sys.argv[2], "w") as f:
    f.write("/* Generated from README.md by tests/abi/readme-example.py. */\n" + m.group(1))
