#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""multisend-bench's documented option conflicts against what its parser refuses.

usage: conflicts.py BENCH PAGE CLI_SOURCE

Reads every "Not with ..." / "not with ..." statement of `BENCH --help` (each option's
paragraph) and of PAGE's OPTIONS section (man/multisend-bench.1), as unordered pairs of
options (an option that takes a value with the value the statement names, e.g. --tcp and
--sink netns-drop). Checks that
  - every option named exists (CLI_SOURCE's getopt_long table, bench/cli.c);
  - the help and the man page state the same pairs (either side may state a pair under
    either option);
  - the parser refuses each pair: exit status 2 and a message on stderr that names both
    options (or the refused value), before anything is measured.
A pair the parser accepted would start a benchmark: it is killed after a few seconds and
fails the test. Exit status 0 pass, 1 fail.
"""
import re
import subprocess
import sys

# A value for an option that takes one, when the statement names none: valid alone.
SAMPLE = {
    'timeline': '2', 'mode': 'compare', 'duration': '2', 'iterations': '100', 'rounds': '2',
    'rate': '1000', 'auto-warmup': '1', 'csv': '/dev/null', 'report': '/nonexistent/report',
    'sink': 'deliver', 'fanout': '16', 'size': '64',
}
# What an option needs beside it to be valid alone (so that the refusal is the pair's).
NEEDS = {
    'auto-warmup': ['--backends', 'raw-sendto,auto'],
}
CLAUSE_END = re.compile(r'[.():;]')


def table(source):
    text = open(source, encoding='utf-8').read()
    opts = {}
    for name, kind in re.findall(
            r'\{\s*"([a-z0-9][a-z0-9-]*)"\s*,\s*(no|required|optional)_argument', text):
        opts[name] = kind != 'no'
    return opts


def clause_pairs(subject, text, opts, where, errors):
    """The pairs one paragraph states: SUBJECT against each item after 'not with'."""
    pairs = set()
    for m in re.finditer(r'not with\s+', text, re.I):
        me = (subject, SAMPLE[subject] if opts[subject] else None)
        rest = CLAUSE_END.split(text[m.end():], 1)[0]
        prev = None  # the last item's option, when it took a value
        for tok in re.split(r',\s*|\s+or\s+|\s+and\s+', rest.strip()):
            words = tok.split()
            if not words:
                continue
            if words[0].startswith('--'):
                name = words[0][2:]
                if name not in opts:
                    errors.append(f'{where}: --{subject}: "not with --{name}": no such option')
                    prev = None
                    continue
                value = words[1] if opts[name] and len(words) > 1 else None
                if opts[name] and value is None:
                    value = SAMPLE.get(name)
                pairs.add(frozenset([me, (name, value)]))
                prev = name if opts[name] else None
            elif prev is not None and len(words) == 1:
                pairs.add(frozenset([me, (prev, words[0])]))  # "--sink A or B"
            else:
                break  # prose after the list ("which counts ...")
    return pairs


def help_pairs(bench, opts, errors):
    out = subprocess.run([bench, '--help'], capture_output=True, text=True, check=True).stdout
    pairs = set()
    subject, para = None, []

    def flush():
        if subject:
            pairs.update(clause_pairs(subject, ' '.join(para), opts, '--help', errors))

    for line in out.splitlines():
        m = re.match(r'\s{2}(?:-\w, )?\s*--([a-z0-9-]+)(?:\s+\S+)?(?:\s{2,}(.*))?$', line)
        if m and line.startswith(('  -', '      --')) and m.group(1) in opts:
            flush()
            subject, para = m.group(1), [m.group(2) or '']
        elif line.startswith(' ' * 20) and subject:
            para.append(line.strip())
        else:
            flush()
            subject, para = None, []
    flush()
    return pairs


def man_text(line):
    """A roff line as text: macros' words joined, fonts and escapes dropped."""
    line = line.replace('\\-', '-').replace('\\(mu', 'x')
    line = re.sub(r'\\f[BIRP]', '', line)
    m = re.match(r'\.(B|I|BR|BI|IR|RB|RI|IB)\s+(.*)$', line)
    if m:
        args = [a or b for a, b in re.findall(r'"([^"]*)"|(\S+)', m.group(2))]
        # .B and .I take their words as one text; the others alternate fonts, no space
        line = (' ' if m.group(1) in ('B', 'I') else '').join(args)
    elif line.startswith('.'):
        return ''
    return line


def man_pairs(page, opts, errors):
    pairs = set()
    in_opts, tag_next, subject, para = False, False, None, []

    def flush():
        if subject:
            pairs.update(clause_pairs(subject, ' '.join(para), opts, page, errors))

    for line in open(page, encoding='utf-8').read().splitlines():
        if line.startswith('.SH'):
            flush()
            subject, para = None, []
            in_opts = line.split(None, 1)[1].strip('"') == 'OPTIONS'
            continue
        if not in_opts:
            continue
        if line.startswith(('.TP', '.TQ', '.SS')):
            flush()
            subject, para = None, []
            tag_next = line.startswith(('.TP', '.TQ'))
            continue
        if tag_next:
            tag_next = False
            found = re.findall(r'--([a-z0-9-]+)', man_text(line))
            subject = next((f for f in found if f in opts), None)
            continue
        para.append(man_text(line))
    flush()
    return pairs


def show(pair):
    return ' '.join(f'--{n}' + (f' {v}' if v else '') for n, v in sorted(pair, key=str))


def refused(bench, pair, opts):
    argv = [bench]
    for name, value in sorted(pair, key=str):
        argv += NEEDS.get(name, [])
        argv.append(f'--{name}')
        if opts[name]:
            argv.append(value if value is not None else SAMPLE[name])
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return f'{" ".join(argv[1:])}: accepted (the benchmark started; killed)'
    if r.returncode != 2:
        return f'{" ".join(argv[1:])}: exit {r.returncode}, expected 2'
    msg = r.stderr.strip()
    if not msg.startswith('multisend-bench: '):
        return f'{" ".join(argv[1:])}: exit 2 without a message'
    for name, value in pair:
        if f'--{name}' not in msg and not (value and value in msg):
            return f'{" ".join(argv[1:])}: the message does not name --{name}: {msg}'
    print(f'refused: {" ".join(argv[1:])}: {msg.splitlines()[0]}')
    return None


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    bench, page, source = sys.argv[1:]
    opts = table(source)
    errors = []
    hp = help_pairs(bench, opts, errors)
    mp = man_pairs(page, opts, errors)
    if not hp:
        errors.append('--help states no "not with" pair: the parsing of the help is broken')
    for p in sorted(hp - mp, key=show):
        errors.append(f'--help says {show(p)} exclude each other; the man page does not')
    for p in sorted(mp - hp, key=show):
        errors.append(f'the man page says {show(p)} exclude each other; --help does not')
    for p in sorted(hp | mp, key=show):
        e = refused(bench, p, opts)
        if e:
            errors.append(e)
    for e in errors:
        print(f'FAIL: {e}')
    print(f'{len(hp)} pairs in --help, {len(mp)} in the man page, {len(errors)} problems')
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
