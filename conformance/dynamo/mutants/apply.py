#!/usr/bin/env python3
"""Re-introduce one of Dynamo's seed bugs (research dynamo_fpm.md §8.2) into the
shipped planner, ai-dynamo 1.6.1's ``dynamo/vllm/instrumented_scheduler.py``.

    apply.py NAME_OR_PATH OUT.py [--source SRC.py]   write a patched copy to OUT.py
    apply.py --list                                  the mutants in this folder
    apply.py --check-all [--source SRC.py]           every mutant applies cleanly

A mutant (``<name>.json``, format ``kvsim-dynamo-mutant/1``) is a list of
small text edits; each ``find`` must occur exactly ``count`` times in the
source, otherwise nothing is written and the exit status is 2. The installed
module is never modified: the copy is what ``kvsim dynamo run
--planner-source OUT.py`` runs. Python 3 standard library only.
"""

import argparse
import glob
import hashlib
import json
import os
import sys

FORMAT = "kvsim-dynamo-mutant/1"
HERE = os.path.dirname(os.path.abspath(__file__))
REL = os.path.join("site-packages", "dynamo", "vllm", "instrumented_scheduler.py")
KEYS = {"format", "name", "bug", "summary", "fix_site", "edits", "witness", "expect"}


class MutantError(Exception):
    pass


def installed_source():
    """The installed 1.6.1 module: $KVSIM_DYNAMO_VENV or the default cache."""
    venv = os.environ.get("KVSIM_DYNAMO_VENV") or os.path.expanduser(
        "~/.cache/kvsim/dynamo-1.6.1-vllm-0.31.0"
    )
    hits = sorted(glob.glob(os.path.join(venv, "lib", "python3*", REL)))
    if not hits:
        raise MutantError(
            f"no installed planner under {venv} (run conformance/dynamo/setup_venv.sh "
            "or pass --source)"
        )
    return hits[0]


def mutant_files():
    return sorted(
        p for p in glob.glob(os.path.join(HERE, "*.json")) if os.path.isfile(p)
    )


def load(name_or_path):
    path = name_or_path
    if not os.path.isfile(path):
        path = os.path.join(HERE, name_or_path + ".json")
    if not os.path.isfile(path):
        names = ", ".join(os.path.basename(p)[:-5] for p in mutant_files())
        raise MutantError(f"no mutant {name_or_path!r} (known: {names})")
    with open(path) as f:
        m = json.load(f)
    if m.get("format") != FORMAT:
        raise MutantError(f"{path}: not a {FORMAT} file")
    missing = KEYS - set(m)
    if missing:
        raise MutantError(f"{path}: missing {', '.join(sorted(missing))}")
    if not m["edits"]:
        raise MutantError(f"{path}: no edits")
    return m


def patch(text, mutant):
    """Apply every edit in order; raise MutantError naming the first that does
    not occur exactly ``count`` times (counted in the text as edited so far)."""
    for i, e in enumerate(mutant["edits"]):
        find, repl, count = e["find"], e["replace"], int(e.get("count", 1))
        have = text.count(find)
        if have != count:
            raise MutantError(
                f"mutant {mutant['name']}: edit {i}: `find` occurs {have} time(s), "
                f"expected {count}: {find[:80]!r}"
            )
        text = text.replace(find, repl)
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("mutant", nargs="?", help="a mutant name or a mutant file")
    ap.add_argument("out", nargs="?", help="where to write the patched module")
    ap.add_argument("--source", help="patch this file instead of the installed module")
    ap.add_argument("--list", action="store_true", help="list the mutants")
    ap.add_argument("--check-all", action="store_true", help="check that every mutant applies")
    args = ap.parse_args(argv)
    try:
        if args.list:
            for p in mutant_files():
                m = load(p)
                print(f"{m['name']:32} bug {m['bug']:>2}  {m['expect']:18} {m['summary']}")
            return 0
        src = args.source or installed_source()
        with open(src) as f:
            text = f.read()
        if args.check_all:
            bad = 0
            for p in mutant_files():
                try:
                    m = load(p)
                    patch(text, m)
                    print(f"ok    {m['name']}")
                except MutantError as exc:
                    bad += 1
                    print(f"FAIL  {exc}")
            n = len(mutant_files())
            print(f"{n - bad} of {n} mutants apply to {src}")
            return 2 if bad else 0
        if not (args.mutant and args.out):
            ap.error("NAME_OR_PATH and OUT.py are required (or --list / --check-all)")
        m = load(args.mutant)
        out = patch(text, m)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(out)
        os.replace(tmp, args.out)
        digest = hashlib.sha256(out.encode()).hexdigest()[:12]
        print(f"{m['name']} (bug {m['bug']}): {len(m['edits'])} edit(s) -> {args.out} (sha256 {digest})")
        return 0
    except MutantError as exc:
        print(f"apply.py: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
