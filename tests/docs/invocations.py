#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every tool invocation in README.md, docs/*.md and man/ uses options the tool has.

usage: invocations.py SOURCE_ROOT

Finds each mention of a tool (multisend-bench, multisend-stat, multisend-run,
multisend-kfanout, md-publisher, md-subscriber, md-relay, legacy-fanout, fanout-receiver),
by its name or a path ending in it, and reads the long options that follow it on the same
command (continued lines joined) up to a separator (`|`, `;`, `&`, a closing backtick or
parenthesis) or ` -- ` (what follows is another program's command line). Each must be one
the tool accepts: its getopt_long table (or multisend-run's case patterns), read from the
sources. A tool name given as another option's value (`--bench PATH`) is not an invocation.
Exit status 0 pass, 1 fail.
"""
import glob
import os
import re
import sys

GETOPT = re.compile(r'\{\s*"([a-z0-9][a-z0-9-]*)"\s*,\s*(?:no|required|optional)_argument')
SOURCES = {
    'multisend-bench': ['bench/cli.c'],
    'multisend-stat': ['bench/multisend-stat.c'],
    'multisend-kfanout': ['tools/multisend-kfanout.c'],
    'md-publisher': ['examples/md-publisher.c', 'examples/md-serve.h'],
    'md-subscriber': ['examples/md-subscriber.c'],
    'md-relay': ['examples/md-relay.c', 'examples/md-serve.h'],
    'legacy-fanout': ['examples/legacy-fanout.c'],
    'fanout-receiver': ['examples/fanout-receiver.c'],
}


def accepted(root):
    tools = {}
    for tool, files in SOURCES.items():
        tools[tool] = set()
        for f in files:
            tools[tool] |= set(GETOPT.findall(open(os.path.join(root, f), encoding='utf-8').read()))
    run = open(os.path.join(root, 'shim/multisend-run.in'), encoding='utf-8').read()
    tools['multisend-run'] = set(re.findall(r'^\s*--([a-z0-9-]+)(?:=\*)?\)', run, re.M))
    return tools


def plain(text, roff):
    if roff:
        text = text.replace('\\-', '-').replace('\\e\n', ' ')
        text = re.sub(r'\\f[BIRP]', '', text)
        text = re.sub(r'^\.(?:B|I|BR|BI|IR|RB|RI|IB)\s+', '', text, flags=re.M)
        text = text.replace('"', '')
    return text.replace('\\\n', ' ')


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else '.'
    tools = accepted(root)
    names = '|'.join(re.escape(t) for t in sorted(tools, key=len, reverse=True))
    mention = re.compile(r'(?<![\w.-])(?:[\w./]*/)?(' + names + r')(?![\w-])')
    files = [os.path.join(root, 'README.md')] + sorted(glob.glob(os.path.join(root, 'docs', '*.md')))
    files += sorted(glob.glob(os.path.join(root, 'man', '*.[1-8]')))
    bad = checked = 0
    for path in files:
        text = plain(open(path, encoding='utf-8').read(), not path.endswith('.md'))
        for lineno, line in enumerate(text.split('\n'), 1):
            for m in mention.finditer(line):
                before = line[:m.start()].rstrip()
                if re.search(r'--[a-z0-9-]+=?$', before):
                    continue  # a value of another program's option
                rest = re.split(r'[|;&`)]| -- ', line[m.end():], maxsplit=1)[0]
                tool = m.group(1)
                for opt in re.findall(r'(?<!\S)--([a-z0-9][a-z0-9-]*)', rest):
                    checked += 1
                    if opt not in tools[tool]:
                        bad += 1
                        print(f'{os.path.relpath(path, root)}:{lineno}: {tool} has no --{opt}: '
                              f'{line.strip()[:160]}')
    print(f'{checked} options of tool invocations checked, {bad} unknown')
    return 1 if bad or not checked else 0


if __name__ == '__main__':
    sys.exit(main())
