#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks of the man pages in man/ (suite 'man' in man/meson.build).

  check.py lint MANDIR                 every page renders with groff -ww -z -man without a
                                       warning; every .so stub names a page that exists
  check.py coverage MANDIR LIB MAP     every function the built library exports (nm -D
                                       --defined-only LIB; the version script MAP if nm is
                                       missing) has a page by its name in section 3
  check.py synopsis MANDIR HEADER       each exported function's prototype in HEADER appears,
                                       word for word, in the SYNOPSIS of its page; the
                                       SEE ALSO of libmultisend.3 names every other page
  check.py options TOOL PAGE SOURCE... the long options TOOL accepts (read from its sources:
                                       bench/cli.c's and multisend-stat.c's getopt_long
                                       tables, md-relay's with md-serve.h's, multisend-run's
                                       case patterns) equal the options PAGE documents (the
                                       tags of its OPTIONS section)

Exit status 0 pass, 1 fail.
"""
import os
import re
import shutil
import subprocess
import sys

# Accepted but internal, deliberately undocumented.
INTERNAL = {
    'multisend-bench': {'callgrind-child'},  # what --callgrind runs under valgrind
}

SO_RE = re.compile(r'^\.so (man([1-8])/([A-Za-z0-9_.+-]+)\.([1-8]))\s*$')


def pages(mandir):
    return sorted(f for f in os.listdir(mandir) if re.fullmatch(r'[A-Za-z0-9_.+-]+\.[1-8]', f))


def stub_target(path):
    with open(path, encoding='utf-8') as f:
        text = f.read()
    lines = [l for l in text.splitlines() if l.strip() and not l.startswith('.\\"')]
    if len(lines) == 1 and lines[0].startswith('.so '):
        m = SO_RE.match(lines[0])
        return m if m else False
    return None


def lint(mandir):
    groff = shutil.which('groff')
    if not groff:
        print('groff not found (Debian: groff-base; scripts/install-deps installs it)')
        return 77
    bad = 0
    for p in pages(mandir):
        path = os.path.join(mandir, p)
        t = stub_target(path)
        if t is False:
            print(f'{p}: a .so line that is not ".so manN/NAME.N"')
            bad += 1
            continue
        if t is not None:
            target = os.path.join(mandir, f'{t.group(3)}.{t.group(4)}')
            if t.group(2) != t.group(4) or not os.path.isfile(target):
                print(f'{p}: .so {t.group(1)}: no such page in {mandir}')
                bad += 1
            elif stub_target(target) is not None:
                print(f'{p}: .so {t.group(1)}: the target is itself a stub')
                bad += 1
            continue
        r = subprocess.run([groff, '-ww', '-z', '-t', '-man', path], capture_output=True, text=True,
                           env=dict(os.environ, LC_ALL='C.UTF-8'))
        out = (r.stdout + r.stderr).strip()
        if r.returncode or out:
            print(f'{p}: groff -ww -z -t -man: exit {r.returncode}\n{out}')
            bad += 1
        else:
            print(f'{p}: clean')
    print(f'{len(pages(mandir))} pages, {bad} with problems')
    return 1 if bad else 0


def exported(lib, mapfile):
    nm = shutil.which('nm')
    if nm:
        r = subprocess.run([nm, '-D', '--defined-only', lib], capture_output=True, text=True)
        if r.returncode == 0:
            names = set()
            for line in r.stdout.splitlines():
                parts = line.split()
                if len(parts) >= 3 and parts[1] in 'TtWiI':
                    names.add(parts[2].split('@')[0])
            return names, f'nm -D --defined-only {lib}'
    text = open(mapfile, encoding='utf-8').read()
    text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
    glob = re.search(r'global:(.*?)(local:|\})', text, re.S).group(1)
    return set(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)\s*;', glob)), f'the version script {mapfile}'


def coverage(mandir, lib, mapfile):
    names, how = exported(lib, mapfile)
    names = {n for n in names if not n.startswith('_')}
    have = set(pages(mandir))
    missing = sorted(n for n in names if f'{n}.3' not in have)
    print(f'{len(names)} functions exported ({how}); {len(names) - len(missing)} have a page')
    for n in missing:
        print(f'MISSING: {n} is exported but man/{n}.3 does not exist (a page or a '
              f'".so man3/FAMILY.3" stub)')
    return 1 if missing or not names else 0


def source_options(tool, source):
    text = open(source, encoding='utf-8').read()
    if tool == 'multisend-run':
        # The script's case patterns: --name) and --name=*)
        opts = set(re.findall(r'^\s*(?:[^)\n]*\|\s*)?--([a-z0-9][a-z0-9-]*)(?:=\*)?\s*(?:\|[^)\n]*)?\)',
                              text, re.M))
        return opts
    # A getopt_long table: { "name", required_argument|no_argument, ... }
    return set(re.findall(r'\{\s*"([a-z0-9][a-z0-9-]*)"\s*,\s*(?:no|required|optional)_argument',
                          text))


def page_options(page):
    text = open(page, encoding='utf-8').read().splitlines()
    opts = set()
    in_opts = False
    after_tp = False
    for line in text:
        if line.startswith('.SH'):
            in_opts = line.split(None, 1)[1].strip().strip('"') == 'OPTIONS' if ' ' in line else False
            continue
        if not in_opts:
            continue
        if line.startswith(('.TP', '.TQ')):
            after_tp = True
            continue
        if after_tp:
            opts |= {m.replace('\\-', '-')
                     for m in re.findall(r'\\-\\-((?:[a-z0-9]|\\-)+)', line)}
            after_tp = False
    return opts


def options(tool, page, sources):
    accepted = set().union(*(source_options(tool, s) for s in sources))
    accepted -= INTERNAL.get(tool, set())
    source = ', '.join(sources)
    documented = page_options(page)
    undocumented = sorted(accepted - documented)
    unknown = sorted(documented - accepted)
    print(f'{tool}: {len(accepted)} long options in {", ".join(map(os.path.basename, sources))}, '
          f'{len(documented)} documented in {os.path.basename(page)}')
    for o in undocumented:
        print(f'FAIL: {tool} accepts --{o} ({source}) but {page} does not document it')
    for o in unknown:
        print(f'FAIL: {page} documents --{o} but {tool} does not accept it ({source})')
    return 1 if undocumented or unknown else 0


def roff_text(line):
    """The text of one .B/.BI/.BR/.I line (alternating fonts joined), or of a text line."""
    import shlex
    if re.match(r'^\.(B|I|BI|IB|BR|RB|IR|RI)\s', line):
        macro, rest = line.split(None, 1)
        words = shlex.split(rest.replace('\\', '\\\\'))
        line = (' ' if macro in ('.B', '.I') else '').join(words)
    elif line.startswith('.'):
        return ''
    return line.replace('\\\\', '\\').replace('\\-', '-').replace('\\(dq', '"').replace('\\e', '\\')


def synopsis_of(mandir, name):
    path = os.path.join(mandir, f'{name}.3')
    t = stub_target(path)
    if t:
        path = os.path.join(mandir, f'{t.group(3)}.{t.group(4)}')
    text, on = [], False
    for line in open(path, encoding='utf-8').read().splitlines():
        if line.startswith('.SH'):
            on = line.strip() == '.SH SYNOPSIS'
            continue
        if on:
            text.append(roff_text(line))
    return ' '.join(' '.join(text).split())


def synopsis(mandir, header):
    text = re.sub(r'/\*.*?\*/', '', open(header, encoding='utf-8').read(), flags=re.S)
    protos = [' '.join(p.split()) for p in re.findall(r'^MS_EXPORT\s+([^;]*;)', text, re.M)]
    bad = 0
    for p in protos:
        name = re.search(r'(\w+)\s*\(', p).group(1)
        if not os.path.exists(os.path.join(mandir, f'{name}.3')):
            print(f'{name}: no page (see the coverage test)')
            bad += 1
        elif p not in synopsis_of(mandir, name):
            print(f'{name}: the SYNOPSIS of its page lacks the header\'s prototype\n  {p}')
            bad += 1
    see = open(os.path.join(mandir, 'libmultisend.3'), encoding='utf-8').read()
    see = see.split('.SH SEE ALSO', 1)[-1].replace('\\-', '-')
    for page in pages(mandir):
        stem, sec = page.rsplit('.', 1)
        if page != 'libmultisend.3' and f'.BR {stem} ({sec})' not in see:
            print(f'libmultisend.3: SEE ALSO does not name {stem}({sec})')
            bad += 1
    print(f'{len(protos)} prototypes in {os.path.basename(header)}, {bad} problems')
    return 1 if bad or not protos else 0


def main(argv):
    if len(argv) >= 3 and argv[1] == 'lint':
        return lint(argv[2])
    if len(argv) == 5 and argv[1] == 'coverage':
        return coverage(argv[2], argv[3], argv[4])
    if len(argv) == 4 and argv[1] == 'synopsis':
        return synopsis(argv[2], argv[3])
    if len(argv) >= 5 and argv[1] == 'options':
        return options(argv[2], argv[3], argv[4:])
    print(__doc__)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
