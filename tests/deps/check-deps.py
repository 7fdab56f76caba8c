#!/usr/bin/env python3
"""Every program the project's scripts and tests run comes from a package that
scripts/install-deps installs (or that one of those depends on), or from the base system that
`debootstrap --variant=minbase` makes (packages marked Essential or of Priority required).

The programs are found by scanning the sources, not by a list kept by hand (a list goes stale
the day someone adds a tool):
  - shell scripts (scripts/*, tests/**/*.sh, shim/*.in, .ci/run) and the README's and docs'
    runnable blocks: the first word of every simple command (after `|`, `;`, `&&`, `$(`, `then`,
    `do`, `!`, VAR=value, and wrappers like `exec`, `timeout N`, `ip netns exec NS`, `nice`,
    `env`, `unshare ...`, `setpriv ...`, `script -c`);
  - Python: the first string of a list literal (["ip", "link", ...]), the command string of
    subprocess calls, shutil.which("x");
  - C: exec*/posix_spawn*/system/popen arguments, argv initialisers (char *argv[] = { "x", ...)
    and command lines handed to a shell helper (sh("ip netns add %s"));
  - meson: find_program('x', ...).
A word counts as a program when it is a file in PATH here (`type -P`); words that are shell
functions, builtins only, variables or the project's own programs are not found there and are
left out. Each program is resolved to its file (command -v, realpath, and both sides of the
/usr merge: /bin/x and /usr/bin/x) and to its package with `dpkg -S`; the package must be in
install-deps's list (its `packages=(...)` array), in the Depends/Pre-Depends closure of that
list (what apt installs with --no-install-recommends), or Essential/required.

The data files those programs read are checked the same way (a minbase root lacks netbase, so
/etc/protocols, and `ip rule add ipproto udp ...` failed there with every program installed):
each construct that hands a program or the C library a symbolic name (`ipproto NAME`, nft's
`udp dport NAME`, iptables' `-p NAME`, getprotobyname/getservbyname/getaddrinfo's service, ip's
`table`/`proto`/`scope`/`tos`/`realm`/`group NAME`, tc's netem distribution, the host names
localhost/ip6-localhost/ip6-loopback, TZ= and LANG=/LC_*= values, https downloads) is found in
the sources outside comments, mapped to the file it is looked up in (/etc/protocols,
/etc/services, /etc/hosts, /etc/iproute2/*, /usr/share/zoneinfo, /usr/lib/locale, the CA
bundle), and that file must exist here, hold the name, and come from a covered package (dpkg -S,
or the package whose maintainer script writes it, as netbase's postinst writes /etc/hosts).
Absolute paths the sources name under /etc, /usr/share, /usr/lib, /lib and /var/lib are
resolved the same way; one that no package provides (a host's /etc/resolv.conf, which
scripts/fresh-check copies) is listed with -v, not failed.

Exit 0 when every program and data file is covered, 1 with one line per missing program or
file naming it, the file that provides it, its package and where the sources use it; 77 when
this is not a Debian system (no dpkg).
"""
import glob
import os
import re
import shutil
import subprocess
import sys

src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                      os.path.join(os.path.dirname(__file__), '..', '..'))
verbose = '-v' in sys.argv[2:]

if not shutil.which('dpkg-query') or not shutil.which('dpkg'):
    print('SKIP: not a Debian system (no dpkg)')
    sys.exit(77)

# Words the scan takes for programs where they are not (a file of that name in PATH, used as
# data): the escape hatch for a false alarm, each with its reason. Empty today.
NOT_PROGRAMS = set()

# Wrappers whose arguments hold a further command, found after their options (words starting
# with '-', VAR=value, and timeout's duration).
WRAPPERS = {'exec', 'env', 'nice', 'nohup', 'sudo', 'time', 'command', 'chroot', 'setsid',
            'stdbuf', 'taskset', 'timeout', 'unshare', 'setpriv', 'prlimit', 'nsenter',
            'valgrind', 'strace', 'xargs', 'ionice', 'chrt', 'runuser', 'su', 'flock',
            'capsh', 'setarch'}


def files():
    """The sources to scan: committed files only (git ls-files), so build output never counts."""
    out = subprocess.run(['git', '-C', src, 'ls-files', '-z'], capture_output=True, text=True)
    if out.returncode != 0:  # not a clone (an unpacked tarball): walk the tree instead
        names = []
        for root, dirs, fs in os.walk(src):
            dirs[:] = [d for d in dirs if not d.startswith(('build', '.git'))]
            names += [os.path.relpath(os.path.join(root, f), src) for f in fs]
    else:
        names = [n for n in out.stdout.split('\0') if n]
    return sorted(names)


def kind(name):
    path = os.path.join(src, name)
    if not os.path.isfile(path) or '/corpus/' in name:
        return None
    base = os.path.basename(name)
    if base == 'meson.build':
        return 'meson'
    if name.endswith(('.c', '.h')):
        return 'c'
    if name.endswith('.py'):
        return 'py'
    if name.endswith('.md'):
        return 'md'
    if name.endswith(('.sh', '.bash')):
        return 'sh'
    try:
        with open(path, 'rb') as f:
            first = f.readline(200)
    except OSError:
        return None
    if first.startswith(b'#!'):
        if b'python' in first:
            return 'py'
        if re.search(rb'\b(ba|da)?sh\b', first):
            return 'sh'
    if name.endswith('.in') and first.startswith(b'#!'):
        return 'sh'
    return None


SPLIT = re.compile(r'\|\||&&|[|;&`()]|\$\(|\bthen\b|\bdo\b|\belse\b|\bif\b|\bwhile\b|\buntil\b|'
                   r'\bthen\b|!\s|\{\s|\}')
WORD = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.+-]*$')


def strip_comment(line):
    out, q = [], None
    for i, ch in enumerate(line):
        if q:
            if ch == q:
                q = None
        elif ch in '\'"':
            q = ch
        elif ch == '#' and (i == 0 or line[i - 1] in ' \t;'):
            break
        out.append(ch)
    return ''.join(out)


def first_words(segment):
    """The program of one simple command, and those of any command it wraps."""
    words = segment.strip().split()
    found = []
    i = 0
    while i < len(words):
        w = words[i].strip('"\'')
        if re.match(r'^[A-Za-z_][A-Za-z0-9_]*=', w) or w in ('!', '{', '}', 'then', 'do',
                                                             'else', 'if', 'while', 'until'):
            i += 1
            continue
        if not WORD.match(w):
            if w.startswith('/') and WORD.match(os.path.basename(w)):
                found.append(w)
            return found
        found.append(w)
        if w == 'ip' and words[i + 1:i + 3] and words[i + 1] in ('netns', '-n') and \
                i + 4 < len(words) and words[i + 2] == 'exec':
            i += 4
            continue
        if w in WRAPPERS:
            i += 1
            while i < len(words) and (words[i].startswith('-') or
                                      re.match(r'^[A-Za-z_][A-Za-z0-9_]*=', words[i]) or
                                      (w == 'timeout' and re.match(r'^[0-9.]+[smhd]?$',
                                                                   words[i]))):
                i += 1
            continue
        return found
    return found


# Shell builtins (bash and dash): `kill`, `echo`, `test` in a script never run a program, even
# where a file of that name exists (/bin/kill is procps's).
BUILTINS = set(subprocess.run(['bash', '-c', 'compgen -b; compgen -k'], capture_output=True,
                              text=True).stdout.split())

# Shell functions that run their arguments as a command ("$@"), found in every script scanned
# (tests/harness.sh's bg, a test's inns NS CMD...): a call's first plain word after the
# function's own arguments ($vars, options) is a program.
RUNNERS = set()
# Every shell function the scripts define (stat-test.sh's patch, harness.sh's bg): in a shell
# script such a name calls the function, not the program of that name.
FUNCTIONS = set()


def find_runners(text):
    text = re.sub(r'\\\n', ' ', text)
    for m in re.finditer(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(\)\s*\{([^\n]*)\}\s*;?\s*$|'
                         r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(\)\s*\{[ \t]*\n(.*?)^\s*\}', text,
                         flags=re.S | re.M):
        name, body = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        FUNCTIONS.add(name)
        for line in body.split('\n'):
            toks = line.split()
            for i, t in enumerate(toks):
                if t.rstrip(';') != '"$@"':
                    continue
                prev = toks[i - 1] if i else ''
                # "$@" is the command (not arguments of one) after nothing, a separator, a
                # wrapper (exec, env, timeout N...) or an expansion ("$ns" of ip netns exec).
                if prev in ('', ';', '{', '&&', '||', '|', 'then', 'do', 'else') or \
                        prev in WRAPPERS or prev.startswith(('$', '"$')) or \
                        re.match(r'^[0-9.]+[smhd]?$', prev):
                    RUNNERS.add(name)


def heredocs(text):
    """The text without here-document bodies, and the bodies fed to python."""
    out, py = [], []
    lines = text.split('\n')
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        m = re.search(r'<<-?\s*[\'"]?([A-Za-z_][A-Za-z0-9_]*)[\'"]?', line)
        i += 1
        if not m:
            continue
        body = []
        while i < len(lines) and lines[i].strip() != m.group(1):
            body.append(lines[i])
            out.append('')
            i += 1
        if 'python' in line:
            py.append(('\n' * (len(out) - len(body) - 1)) + '\n'.join(body))
    return '\n'.join(out), py


def scan_shell(text, where, add):
    text, py = heredocs(text)
    for body in py:
        scan_python(body, where, add)
    # Continued lines joined, each at its first line's number (blank lines keep the count).
    joined = re.sub(r'((?:[^\n]*\\\n)+[^\n]*)',
                    lambda m: m.group(1).replace('\\\n', ' ') + '\n' * m.group(1).count('\\\n'),
                    text)
    for n, line in enumerate(joined.split('\n'), 1):
        line = strip_comment(line)
        if not line.strip() or re.match(r'^\s*[A-Za-z_][A-Za-z0-9_]*\s*\(\)\s*$', line):
            continue
        line = re.sub(r'^\s*[A-Za-z_][A-Za-z0-9_]*\s*\(\)\s*\{', ' ', line)
        # A program the script looks for (command -v X, which X) is one it runs when there.
        for w in re.findall(r'\b(?:command -v|which|type -P)\s+([A-Za-z0-9][A-Za-z0-9_.+-]*)', line):
            add(w, f'{where}:{n}', shell=True, probe=True)
        # sh -c '...' and script -c '...' bodies are commands.
        for body in re.findall(r'-c\s+["\']([^"\']+)["\']', line):
            for seg in SPLIT.split(body):
                for w in first_words(seg):
                    add(w, f'{where}:{n}', shell=True)
        # Other quoted text is printed or passed as data: blank it, but keep what $( ) runs.
        line = re.sub(r'"(\\.|[^"\\])*"', lambda m: ' "" ' if '$(' not in m.group(0)
                      else m.group(0)[1:-1], line)
        line = re.sub(r"'[^']*'", " '' ", line)
        for seg in SPLIT.split(line):
            seg = re.sub(r'[0-9]*[<>]+&?\s*\S+', ' ', seg)
            ws = first_words(seg)
            for w in ws:
                add(w, f'{where}:{n}', shell=True)
            if ws and ws[-1] in RUNNERS:
                rest = seg.split()
                k = rest.index(ws[-1]) + 1 if ws[-1] in rest else len(rest)
                while k < len(rest) and (rest[k].startswith(('$', '"', "'", '-')) or
                                         re.match(r'^[0-9.]+$', rest[k])):
                    k += 1
                if k < len(rest):
                    for w in first_words(' '.join(rest[k:])):
                        add(w, f'{where}:{n}', shell=True)


MODULES = {}   # top-level Python module -> [where, ...]


def scan_python(text, where, add):
    for m in re.finditer(r'^[ \t]*(?:import|from)[ \t]+([A-Za-z_][A-Za-z0-9_]*)', text, flags=re.M):
        MODULES.setdefault(m.group(1), []).append(
            f'{where}:{text.count(chr(10), 0, m.start()) + 1}')
    for m in re.finditer(r'\[\s*(?:f|r)?["\']([A-Za-z0-9/][A-Za-z0-9_./+-]*)["\']\s*,', text):
        add(m.group(1), f'{where}:{text.count(chr(10), 0, m.start()) + 1}')
    for m in re.finditer(r'(?:which|run|Popen|check_output|check_call|call|system)\(\s*'
                         r'(?:f|r)?["\']([A-Za-z0-9/][A-Za-z0-9_./+-]*)', text):
        add(m.group(1), f'{where}:{text.count(chr(10), 0, m.start()) + 1}')


def scan_c(text, where, add):
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    text = re.sub(r'//[^\n]*', '', text)
    line = lambda pos: text.count('\n', 0, pos) + 1
    for m in re.finditer(r'\b(?:exec[lv]p?e?|posix_spawnp?|system|popen)\s*\(([^;]*)', text):
        for s in re.findall(r'"([^"]*)"', m.group(1))[:1]:
            w = s.split()[0] if s.split() else ''
            add(w, f'{where}:{line(m.start())}')
    # argv initialisers: char *argv[] = { "x", ...  or  (const char *const[]){ "x", ...
    for m in re.finditer(r'\[\s*\]\s*\)?\s*=?\s*\{\s*"([A-Za-z0-9/][A-Za-z0-9_./+-]*)"\s*,', text):
        add(m.group(1), f'{where}:{line(m.start())}')
    # A command line handed to a helper that runs it through a shell: sh("ip link add ...").
    for m in re.finditer(r'\b(?:sh|sh_ok|run_sh|xsystem|shell)\(\s*"([a-z][a-z0-9_.+-]*)[ "]', text):
        add(m.group(1), f'{where}:{line(m.start())}')


def scan_meson(text, where, add):
    for m in re.finditer(r"find_program\(([^)]*)\)", text):
        # The first name is the one meson looks for first; later ones are fallbacks.
        for s in re.findall(r"'([^']+)'", m.group(1))[:1]:
            add(s, f'{where}:{text.count(chr(10), 0, m.start()) + 1}')


def scan_markdown(text, where, add):
    # Shell blocks marked <!-- runnable --> (tests/docs/readme-runnable.sh runs them): what a
    # reader is told to run on the machine that built the project. Other blocks show deployment
    # (systemctl) or measurements taken elsewhere.
    for m in re.finditer(r'<!-- runnable -->\s*```(?:sh|bash|console)\n(.*?)```', text, flags=re.S):
        body = re.sub(r'^\$ ', '', m.group(1), flags=re.M)
        start = text.count('\n', 0, m.start()) + 1
        scan_shell(body, f'{where}:+{start}', add)
        scan_data(body, f'{where}:+{start}', 'sh')


# Data files: what the programs and libraries read to resolve a name the sources give them. A
# minbase root has no netbase, so no /etc/protocols, and `ip rule add ipproto udp ...` fails
# there with 'argument "udp" is wrong'; the programs were all installed. The names are found
# by scanning the sources (each construct below that takes a symbolic name, wherever the
# sources use one), so a new `dport NAME` or getservbyname("x") is checked the day it is
# written; the constructs are the lookups of the tools the project runs (ip, nft, iptables,
# tc, the C library, python's socket module). Every file so found must exist here, hold the
# name, and come (dpkg -S, or the maintainer script that writes it: netbase's postinst makes
# /etc/hosts) from a package install-deps installs, its dependencies or the base system.
# Each rule: regex whose group 1 is the name, the file it is looked up in ('{}' is the name),
# what looks it up, and the names the program knows without the file.
IP = r'\bip\b(?:\s+-[0-9a-z]+)*(?:\s+-n\s+\S+)?\s+'
DATA_RULES = [
    (r'\bipproto\s+([A-Za-z][\w-]*)', '/etc/protocols', 'ip rule ipproto NAME', ()),
    (r'\b(?:ip\s+protocol|meta\s+l4proto|ip6\s+nexthdr)\s+([A-Za-z][\w-]*)', '/etc/protocols',
     'nft protocol NAME', ('tcp', 'udp', 'udplite', 'icmp', 'icmpv6', 'esp', 'ah', 'comp',
                           'dccp', 'sctp', 'igmp', 'gre')),
    (r'\b(?:ip6?tables|xtables)\b[^\n]*?\s(?:-p|--protocol)\s+([A-Za-z][\w-]*)', '/etc/protocols',
     'iptables -p NAME', ('tcp', 'udp', 'udplite', 'icmp', 'icmpv6', 'ipv6-icmp', 'esp', 'ah',
                          'sctp', 'mh', 'all')),
    (r'\bgetprotobyname(?:_r)?\(\s*[bfr]?["\']([A-Za-z][\w-]*)', '/etc/protocols',
     'getprotobyname()', ()),
    (r'\b(?:udp|tcp|sctp|dccp|udplite|th)\s+[sd]port\s+([A-Za-z][\w-]*)', '/etc/services',
     'ip rule/nft sport|dport NAME', ()),
    (r'--(?:sport|dport|source-port|destination-port)\s+([A-Za-z][\w-]*)', '/etc/services',
     'iptables --dport NAME', ()),
    (r'\bgetservbyname(?:_r)?\(\s*[bfr]?["\']([A-Za-z][\w-]*)', '/etc/services',
     'getservbyname()', ()),
    (r'\bgetaddrinfo\(\s*[^,()]*,\s*[bfr]?["\']([A-Za-z][\w-]*)["\']', '/etc/services',
     'getaddrinfo() service NAME', ()),
    (IP + r'(?:rule|ru|route|ro|r)\b[^\n"]*?\b(?:table|lookup)\s+([A-Za-z][\w-]*)',
     '/etc/iproute2/rt_tables', 'ip route/rule table NAME',
     ('main', 'local', 'default', 'all', 'unspec')),
    (IP + r'(?:route|ro|r)\b[^\n"]*?\bproto\s+([A-Za-z][\w-]*)', '/etc/iproute2/rt_protos',
     'ip route proto NAME', ('unspec', 'redirect', 'kernel', 'boot', 'static', 'gated', 'ra',
                             'mrt', 'zebra', 'bird', 'dnrouted', 'xorp', 'ntk', 'dhcp',
                             'keepalived', 'babel', 'bgp', 'isis', 'ospf', 'rip', 'eigrp')),
    (IP + r'(?:rule|ru|route|ro|r)\b[^\n"]*?\b(?:tos|dsfield)\s+([A-Za-z][\w-]*)',
     '/etc/iproute2/rt_dsfield', 'ip rule/route tos NAME', ()),
    (IP + r'(?:route|ro|r|addr|address|a)\b[^\n"]*?\bscope\s+([A-Za-z][\w-]*)',
     '/etc/iproute2/rt_scopes', 'ip route/addr scope NAME',
     ('global', 'universe', 'nowhere', 'host', 'link', 'site')),
    (IP + r'(?:route|ro|r)\b[^\n"]*?\brealms?\s+([A-Za-z][\w-]*)', '/etc/iproute2/rt_realms',
     'ip route realm NAME', ('unknown',)),
    (IP + r'link\b[^\n"]*?\bgroup\s+([A-Za-z][\w-]*)', '/etc/iproute2/group',
     'ip link group NAME', ('default',)),
    (r'\btc\b[^\n"]*?\bdistribution\s+([A-Za-z]\w*)', '/usr/lib/tc/{}.dist',
     'tc netem distribution NAME', ()),
    (r'(?<![\w.@/-])(localhost|ip6-localhost|ip6-loopback)(?![\w.-])', '/etc/hosts',
     'the host name NAME (getaddrinfo, ping, socat...)', ()),
    (r'\bTZ=["\']?:?([A-Za-z][\w+/-]*)', '/usr/share/zoneinfo/{}', 'TZ=NAME', ('UTC0',)),
    (r'\b(?:LANG|LANGUAGE|LC_[A-Z]+)=["\']?([A-Za-z][\w@.-]*)', '/usr/lib/locale/{}',
     'the locale NAME', ('C', 'POSIX')),
    # A download over TLS reads the CA bundle (ca-certificates, not in a minbase root).
    (r'\b(?:urlopen|curl|wget|git\s+(?:clone|fetch|ls-remote|pull))\b[^\n]*?\b(https)://',
     '/etc/ssl/certs/ca-certificates.crt', 'a download over https', ()),
]
# The files whose entries are names (checked one by one); other files are needed whole.
NAMED = ('/etc/protocols', '/etc/services', '/etc/hosts', '/etc/iproute2/')
# Absolute paths the sources name are data files too (a path under one of these).
DATA_PATH = re.compile(r'(?<![\w/.$*{-])(/(?:etc|usr/share|usr/lib|lib|var/lib)(?:/[A-Za-z0-9_.+-]+)+)'
                       r'(?![\w/*$%{.-])')

data_uses = {}   # (file, name or None, what) -> [where, ...]


def code_only(text, k):
    """The text without comments (a comment naming /etc/protocols is no use of it), line
    numbers kept."""
    if k == 'c':
        text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
        return re.sub(r'//[^\n]*', '', text)
    if k in ('sh', 'py', 'meson'):
        return '\n'.join(strip_comment(l) for l in text.split('\n'))
    return text


def scan_data(text, where, k):
    text = code_only(text, k)
    line = lambda pos: text.count('\n', 0, pos) + 1
    for rx, file, what, builtin in DATA_RULES:
        for m in re.finditer(rx, text):
            name = m.group(1)
            if name in builtin:
                continue
            if file == '/usr/lib/locale/{}':
                # The C library's own C.UTF-8 is /usr/lib/locale/C.utf8 (libc-bin); others
                # are generated into locale-archive by the locales package.
                lang, _, cs = name.partition('.')
                cs = cs.lower().replace('-', '')
                name = f'{lang}.{cs}' if cs else lang
            named = '{}' not in file and file.startswith(NAMED)
            data_uses.setdefault((file.format(name), name if named else None, what),
                                 []).append(f'{where}:{line(m.start())}')
    for m in DATA_PATH.finditer(text):
        data_uses.setdefault((m.group(1), None, 'a path the sources name'),
                             []).append(f'{where}:{line(m.start())}')


uses = {}   # program word -> [where, ...]
probed = set()  # looked for before use (command -v): optional where missing


def add(word, where, **kw):
    if not word or word in NOT_PROGRAMS or (kw.get('shell') and (word in BUILTINS or word in FUNCTIONS)):
        return
    if word.startswith('/'):
        if word.startswith(('/proc/', '/dev/', '/tmp/', '/sys/')):
            return
    elif not WORD.match(word):
        return
    if kw.get('probe'):
        probed.add(word)
    uses.setdefault(word, []).append(where)


sources = [(n, kind(n)) for n in files()]
for name, k in sources:
    if k == 'sh':
        find_runners(open(os.path.join(src, name), encoding='utf-8', errors='replace').read())
for name, k in sources:
    if not k:
        continue
    if k == 'md' and not (name == 'README.md' or name.startswith('docs/')):
        continue
    try:
        text = open(os.path.join(src, name), encoding='utf-8', errors='replace').read()
    except OSError:
        continue
    {'sh': scan_shell, 'py': scan_python, 'c': scan_c, 'meson': scan_meson,
     'md': scan_markdown}[k](text, name, add)
    if k != 'md' and not name.startswith('tests/deps/'):   # not this file's own patterns
        scan_data(text, name, k)

# install-deps's package list, read from the script itself (the bash array `packages=(...)`).
deps_text = open(os.path.join(src, 'scripts', 'install-deps')).read()
m = re.search(r'^packages=\((.*?)\)', deps_text, flags=re.S | re.M)
if not m:
    print('FAIL: no packages=(...) list in scripts/install-deps')
    sys.exit(1)
listed = set(re.sub(r'#[^\n]*', '', m.group(1)).split())


# Every installed package's fields in one dpkg-query call (one per package is slow on a loaded
# machine).
installed = {}
provides = {}
r = subprocess.run(['dpkg-query', '-W', '-f',
                    '${Package}\t${db:Status-Status}\t${Essential}\t${Priority}\t${Depends}, '
                    '${Pre-Depends}\t${Provides}\n'], capture_output=True, text=True)
for line in r.stdout.splitlines():
    f = line.split('\t')
    if len(f) < 6 or f[1] != 'installed':
        continue
    installed[f[0]] = f
    for x in f[5].split(','):
        if x.strip():
            provides.setdefault(x.split()[0], []).append(f[0])

# The closure apt installs with --no-install-recommends: Depends and Pre-Depends, recursively,
# each alternative group satisfied by its installed members (or by what provides it).
closure = set()
todo = list(listed)
while todo:
    p = todo.pop()
    if p in closure:
        continue
    closure.add(p)
    if p not in installed:
        continue
    for group in installed[p][4].split(','):
        for alt in group.split('|'):
            name = alt.split('(')[0].split(':')[0].strip()
            if name in installed:
                todo.append(name)
            elif name:
                todo += provides.get(name, [])


def base(pkg):
    """In a minbase root: Essential: yes, Priority: required (and apt, which debootstrap adds)."""
    f = installed.get(pkg)
    return pkg == 'apt' or (f is not None and (f[2] == 'yes' or f[3] == 'required'))


def candidates(path):
    cands = [path, os.path.realpath(path)]
    for c in list(cands):
        for a, b in (('/usr/bin/', '/bin/'), ('/usr/sbin/', '/sbin/'),
                     ('/bin/', '/usr/bin/'), ('/sbin/', '/usr/sbin/')):
            if c.startswith(a):
                cands.append(b + c[len(a):])
    return list(dict.fromkeys(cands))


def owners(paths):
    """dpkg -S for many paths in one call: path -> [package, ...]."""
    r = subprocess.run(['dpkg', '-S'] + sorted(set(paths)), capture_output=True, text=True)
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith('diversion '):
            continue
        pkgs, _, path = line.partition(': ')
        out.setdefault(path.strip(), []).extend(p.strip().split(':')[0] for p in pkgs.split(','))
    return out


PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
missing, unknown, ok = [], [], []
paths = {}
for word in sorted(uses):
    if word.startswith('/'):
        path = word if os.path.exists(word) else None
    else:
        path = shutil.which(word, path=PATH)
    if path:
        paths[word] = path
    else:
        unknown.append(word)
# Python modules the scripts import: each resolved by python3 itself to its file (a module of
# the project's own, next to its script, is not a dependency), then to its package like a
# program. Modules built into the interpreter belong to python3.
local_modules = {os.path.splitext(os.path.basename(n))[0] for n, k in sources if k == 'py'}
r = subprocess.run([shutil.which('python3', path=PATH) or 'python3', '-c', '''
import importlib.util, sys
for name in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    origin = spec.origin if spec else "-"
    print(name, origin if origin and origin.startswith("/") else ("built-in" if spec else "-"))
'''] + sorted(set(MODULES) - local_modules), capture_output=True, text=True)
for line in r.stdout.splitlines():
    name, origin = line.split(' ', 1)
    key = 'python3 module ' + name
    if origin == '-':
        missing.append(f'{key}: not importable here (python3 -c "import {name}"); used at '
                       + ', '.join(sorted(set(MODULES[name]))[:4]))
    elif origin == 'built-in':
        uses[key] = MODULES[name]
        paths[key] = shutil.which('python3', path=PATH)
    else:
        uses[key] = MODULES[name]
        paths[key] = origin
owner = owners([c for p in paths.values() for c in candidates(p)])
for word, path in paths.items():
    pkgs, file = None, path
    for c in candidates(path):
        if c in owner:
            pkgs, file = owner[c], c
            break
    n = len(set(uses[word]))
    where = ', '.join(sorted(set(uses[word]))[:4]) + (f' (+{n - 4} more)' if n > 4 else '')
    if not pkgs:
        if path.startswith('/usr/local/') or path.startswith(src):
            unknown.append(word)
            continue
        missing.append(f'{word}: {path} belongs to no Debian package; used at {where}')
        continue
    good = [p for p in pkgs if p in listed or p in closure or base(p)]
    if good:
        ok.append(f'{word}: {file} from {good[0]}' + (' (listed)' if good[0] in listed else
                  ' (a dependency of the list)' if good[0] in closure else ' (base system)'))
    else:
        missing.append(f'{word}: {file} is in package {" or ".join(pkgs)}, which '
                       f'scripts/install-deps does not install: add {pkgs[0]} to its packages; '
                       f'used at {where}')



def names_in(path):
    """The names a table file defines: protocols and services (name and aliases), hosts (every
    host name of a line), iproute2's tables (the second field), and their .d/*.conf parts."""
    parts = [path] + sorted(glob.glob(path + '.d/*.conf'))
    names = set()
    for p in parts:
        try:
            lines = open(p, encoding='utf-8', errors='replace').read().split('\n')
        except OSError:
            continue
        for l in lines:
            f = l.split('#', 1)[0].split()
            if len(f) < 2:
                continue
            if path in ('/etc/protocols', '/etc/services'):
                names.update([f[0]] + f[2:])
            else:
                names.update(f[1:])
    return names


_scripts = None


def written_by(path):
    """Packages whose maintainer scripts name the path: a file dpkg does not list but a
    package makes (netbase's postinst writes /etc/hosts when there is none)."""
    global _scripts
    if _scripts is None:
        _scripts = {}
        for f in glob.glob('/var/lib/dpkg/info/*.postinst'):
            try:
                _scripts[f] = open(f, encoding='utf-8', errors='replace').read()
            except OSError:
                pass
    pkgs = []
    for f, text in _scripts.items():
        if re.search(r'(?<![\w/.-])' + re.escape(path) + r'(?![\w/.-])', text):
            pkgs.append(os.path.basename(f).rsplit('.', 1)[0].split(':')[0])
    return sorted(set(pkgs))


data_ok, data_host = [], []
data_files = {}
for (file, name, what), wheres in data_uses.items():
    data_files.setdefault(file, []).append((name, what, sorted(set(wheres))))
data_owner = owners([c for f in data_files if os.path.exists(f) for c in candidates(f)])
for file in sorted(data_files):
    entries = data_files[file]
    allw = sorted({w for _, _, ws in entries for w in ws})
    where = ', '.join(allw[:4]) + (f' (+{len(allw) - 4} more)' if len(allw) > 4 else '')
    names = sorted({n for n, _, _ in entries if n})
    whats = sorted({w for _, w, _ in entries})
    looked_up = any(w != 'a path the sources name' for w in whats)
    if not os.path.exists(file):
        if not looked_up:
            data_host.append(f'{file} (not on this machine; used at {where})')
            continue
        missing.append(f'{file}: not on this machine, but {"; ".join(whats)} reads it '
                       f'({" ".join(names) or os.path.basename(file)}): install the package '
                       f'that provides it and add it to scripts/install-deps; used at {where}')
        continue
    if names:
        have = names_in(file)
        for n in names:
            if n not in have:
                ws = sorted({w for nn, _, ws in entries if nn == n for w in ws})
                missing.append(f'{file} has no entry "{n}", which the sources look up there '
                               f'(used at {", ".join(ws[:4])})')
    pkgs, how = None, 'dpkg -S'
    for c in candidates(file):
        if c in data_owner:
            pkgs = data_owner[c]
            break
    if not pkgs:
        pkgs, how = written_by(file), 'written by its maintainer script'
    if not pkgs:
        if looked_up:
            missing.append(f'{file}: belongs to no Debian package (nor does any maintainer '
                           f'script write it), but {"; ".join(whats)} reads it; used at {where}')
        else:
            data_host.append(f'{file} (this machine\'s own, from no package; used at {where})')
        continue
    good = [p for p in pkgs if p in listed or p in closure or base(p)]
    label = f'{file}' + (f' ({" ".join(names)})' if names else '')
    if good:
        data_ok.append(f'{label} from {good[0]}' + (f', {how}' if how != 'dpkg -S' else '') +
                       (' (listed)' if good[0] in listed else ' (a dependency of the list)'
                        if good[0] in closure else ' (base system)'))
    else:
        missing.append(f'{label}: from package {" or ".join(pkgs)} ({how}), which '
                       f'scripts/install-deps does not install: add {pkgs[0]} to its packages; '
                       f'{"; ".join(whats)}; used at {where}')

if verbose:
    for line in ok:
        print('ok  ' + line)
    if unknown:
        print('not in PATH here (functions, variables, the project\'s own programs): ' +
              ' '.join(unknown))
absent = sorted(w for w in set(unknown) & probed if w[:1].islower())
if absent:
    print('looked for by the scripts (command -v) but not installed here, so not checked: ' +
          ' '.join(absent))
if verbose:
    for line in data_ok:
        print('ok  data ' + line)
    for line in data_host:
        print('not checked (a host file a script reads, or not here): ' + line)
print(f'{len(ok)} programs and {len(data_ok)} data files covered by install-deps or the base '
      f'system, {len(missing)} not')
for line in missing:
    print('FAIL: ' + line)
sys.exit(1 if missing else 0)
