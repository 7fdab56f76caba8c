#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ABI check of the built shared library against the version script and the public header.

usage: check-symbols.py READELF LIBRARY MAP_FILE HEADER SONAME

Checks, and prints every disagreement:
  1. the library's SONAME is SONAME;
  2. the dynamic symbols the library defines (less the version-node symbols) are exactly the
     global names of MAP_FILE;
  3. each of them carries a version node of MAP_FILE, and its default (@@) version is the node
     that lists it;
  4. the functions declared with MS_EXPORT in HEADER are exactly the global names of MAP_FILE.
"""
import re
import subprocess
import sys


def parse_map(path):
    """{global name: version node} and the list of node names, from a GNU ld version script."""
    text = open(path, encoding='utf-8').read()
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    text = re.sub(r'#[^\n]*', ' ', text)
    tokens = re.findall(r'[A-Za-z0-9_.*?\[\]"]+|[{}:;]', text)
    names, nodes, node, scope, depth = {}, [], None, None, 0
    for i, tok in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ''
        if tok == '{':
            depth += 1
        elif tok == '}':
            depth -= 1
            if depth == 0:
                node, scope = None, None
        elif depth == 0 and nxt == '{':
            node = tok
            nodes.append(tok)
            scope = 'global'  # a node without "global:" exports what it lists
        elif depth == 1 and nxt == ':':
            scope = tok
        elif depth == 1 and tok not in (':', ';') and nxt == ';' and scope == 'global':
            if re.search(r'[*?\[]', tok):
                sys.exit(f'{path}: wildcard "{tok}" in a global list; list names one by one')
            names[tok] = node
    return names, nodes


def parse_header(path):
    """Names of the functions declared on lines starting with MS_EXPORT (joined up to ';')."""
    names, decl = set(), None
    for line in open(path, encoding='utf-8'):
        if decl is None and not line.startswith('MS_EXPORT'):
            continue
        decl = (decl or '') + line
        if ';' in decl:
            m = re.search(r'([A-Za-z_]\w*)\s*\(', decl)
            if not m:
                sys.exit(f'{path}: cannot find the function name in: {decl.strip()}')
            names.add(m.group(1))
            decl = None
    return names


def read_library(readelf, lib):
    """SONAME and {name: [(version, is_default)]} of the symbols the library defines."""
    dyn = subprocess.run([readelf, '-W', '-d', lib], check=True, capture_output=True,
                         text=True).stdout
    m = re.search(r'\(SONAME\)\s+Library soname: \[([^\]]*)\]', dyn)
    soname = m.group(1) if m else None
    syms = subprocess.run([readelf, '-W', '--dyn-syms', lib], check=True, capture_output=True,
                          text=True).stdout
    defined = {}
    for line in syms.splitlines():
        f = line.split()
        # Num: Value Size Type Bind Vis Ndx Name [(verindex)]
        if len(f) < 8 or not f[0].rstrip(':').isdigit() or f[6] == 'UND':
            continue
        if f[4] not in ('GLOBAL', 'WEAK', 'GNU_UNIQUE'):
            continue
        name, sep, version = f[7].partition('@')
        is_default = version.startswith('@')
        version = version.lstrip('@')
        if f[6] == 'ABS' and not sep:
            version = None  # version-node symbol, or an unversioned absolute symbol
        defined.setdefault(name, []).append((version, is_default, f[6]))
    return soname, defined


def listing(title, names):
    return [f'  {title}:'] + [f'    {n}' for n in sorted(names)]


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    readelf, lib, map_path, header, want_soname = sys.argv[1:]
    map_names, nodes = parse_map(map_path)
    hdr_names = parse_header(header)
    soname, defined = read_library(readelf, lib)
    # The version nodes themselves appear as absolute symbols: not part of the interface.
    for n in nodes:
        if all(v is None and ndx == 'ABS' for v, _, ndx in defined.get(n, [(0, 0, 0)])):
            defined.pop(n, None)
    errors = []

    if soname != want_soname:
        errors.append(f'SONAME is {soname!r}, expected {want_soname!r}')

    lib_names, want = set(defined), set(map_names)
    if lib_names != want:
        errors.append(f'exported symbols of {lib} differ from the globals of {map_path}:')
        errors += listing('exported but not in the map', lib_names - want)
        errors += listing('in the map but not exported', want - lib_names)

    for name in sorted(lib_names & want):
        for version, is_default, _ in defined[name]:
            if version not in nodes:
                errors.append(f'{name}: version {version!r} is not a node of the map '
                              f'({", ".join(nodes)})')
            elif is_default and version != map_names[name]:
                errors.append(f'{name}: default version {version}, but the map lists it in '
                              f'{map_names[name]}')
        if not any(d for _, d, _ in defined[name]):
            errors.append(f'{name}: has no default (@@) version')

    if hdr_names != want:
        errors.append(f'MS_EXPORT declarations of {header} differ from the globals of '
                      f'{map_path}:')
        errors += listing('declared MS_EXPORT but not in the map', hdr_names - want)
        errors += listing('in the map but not declared MS_EXPORT', want - hdr_names)

    print(f'library: {lib}\nSONAME:  {soname}\nversion nodes: {", ".join(nodes)}')
    for name in sorted(defined):
        vers = ', '.join(('@@' if d else '@') + str(v) for v, d, _ in defined[name])
        print(f'  {name}{vers}')
    print(f'{len(defined)} exported, {len(want)} in the map, {len(hdr_names)} MS_EXPORT '
          f'in the header')
    if errors:
        print('\nFAIL:\n' + '\n'.join(errors))
        return 1
    print('OK')
    return 0


if __name__ == '__main__':
    sys.exit(main())
