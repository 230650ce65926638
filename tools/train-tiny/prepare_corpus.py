"""Builds the plain-English training corpus from the Python 3.11 documentation sources.

    python3 tools/train-tiny/prepare_corpus.py [--src DIR] [--out DIR]

Source: Debian package `python3.11-doc` (3.11.2-6+deb12u9 on this machine), directory
/usr/share/doc/python3.11/html/_sources/ — the reStructuredText sources of the Python documentation,
Copyright (c) 2001-2023 Python Software Foundation, licensed under the PSF License Agreement (see
/usr/share/doc/python3.11-doc/copyright and `license.rst.txt` in the same tree).

What is kept: prose paragraphs, list items, headings and the bodies of note/warning/function/class
directives, with inline markup reduced to its text (:func:`os.path.join` -> os.path.join,
``x`` -> x, `text <url>`_ -> text). What is dropped: code (literal blocks after '::', doctest
lines, code-block/productionlist/... directives), tables, comments, labels, index entries,
substitutions, and paragraphs that are mostly not letters.

Split (by file, so no document straddles two splits): files are sorted by path; file number i goes
to `test` if i % 20 == 0, to `valid` if i % 20 == 10, else to `train`. Deterministic; no randomness.
Writes OUT/{train,valid,test}.txt (documents separated by a blank line, one paragraph per line),
OUT/chat_{train,valid,test}.jsonl (one synthetic chat turn per section: a question about the
section's heading, answered by its first paragraphs; see section_chats) and OUT/sources.json
(file -> split, characters kept).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

DEFAULT_SRC = Path("/usr/share/doc/python3.11/html/_sources")
# Directories/files of the doc tree that are used. c-api/ and distutils/ are mostly C and build
# recipes, includes/ is code; contents/about/bugs/copyright/license are indexes or legal text.
INCLUDE_DIRS = ("tutorial", "howto", "faq", "reference", "library", "using", "whatsnew",
                "extending", "installing", "install", "distributing")
INCLUDE_FILES = ("glossary.rst.txt",)

# Directives whose whole block (directive line + indented body) is dropped.
DROP_DIRECTIVES = {
    "code-block", "sourcecode", "code", "doctest", "testcode", "testoutput", "testsetup",
    "testcleanup", "literalinclude", "productionlist", "toctree", "index", "highlight", "module",
    "moduleauthor", "sectionauthor", "currentmodule", "include", "raw", "only", "csv-table",
    "table", "list-table", "image", "figure", "opcode", "cmdoption", "option", "envvar",
    "audit-event", "audit-event-table", "impl-detail", "availability", "rubric", "tabularcolumns",
    "program", "c:function", "c:macro", "c:type", "c:member", "c:var", "cfunction", "pdbcommand",
    "2to3fixer", "describe", "digraph", "graphviz", "unicode", "deprecated-removed", "limited-api-list", "maxdepth", "contents", "sidebar", "topic", "autoclass", "autofunction",
}
# Directives whose line is dropped (a signature or a version tag) but whose body is prose.
KEEP_BODY = {
    "note", "warning", "seealso", "versionadded", "versionchanged", "deprecated", "function",
    "class", "method", "attribute", "data", "exception", "decorator", "decoratormethod",
    "classmethod", "staticmethod", "abstractmethod", "coroutinefunction", "coroutinemethod",
    "describe", "tip", "important", "caution", "attention", "hint", "admonition", "glossary",
    "centered", "epigraph", "hlist", "container", "xmlattr", "awaitablefunction",
    "awaitablemethod",
}
DIRECTIVE_RE = re.compile(r"^\s*\.\.\s+([\w:-]+)::(.*)$")
HEADING_RULE_RE = re.compile(r"^\s*([=\-~^\"'*#+`:.])\1{2,}\s*$")
ROLE_RE = re.compile(r":[\w:+-]+:`([^`]*)`")
LINK_RE = re.compile(r"`([^`<]*?)\s*<[^>]*>`__?")
REF_RE = re.compile(r"`([^`]+)`__?")
LITERAL_RE = re.compile(r"``([^`]+)``")
EMPH_RE = re.compile(r"\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*")
FOOTNOTE_RE = re.compile(r"\s*\[#[\w-]*\]_|\s*\[\d+\]_")
SUBST_RE = re.compile(r"\|[\w -]+\|")
BULLET_RE = re.compile(r"^(\*|-|\+|#\.|\d+\.|\(\w\))\s+")


def role_text(inner: str) -> str:
    """`text <target>` -> text; `~a.b.c` -> c; `!x` -> x."""
    m = re.match(r"^(.*?)\s*<[^>]*>$", inner, re.DOTALL)
    if m and m.group(1):
        return m.group(1)
    if inner.startswith("~"):
        return inner[1:].split(".")[-1]
    return inner.lstrip("!")


def inline(text: str) -> str:
    text = ROLE_RE.sub(lambda m: role_text(m.group(1)), text)
    text = LITERAL_RE.sub(r"\1", text)
    text = LINK_RE.sub(r"\1", text)
    text = REF_RE.sub(r"\1", text)
    text = EMPH_RE.sub(lambda m: m.group(1) or m.group(2), text)
    text = FOOTNOTE_RE.sub("", text)
    text = SUBST_RE.sub("", text)
    text = text.replace("\\ ", "").replace("\\", "")
    return re.sub(r"\s+", " ", text).strip()


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def skip_block(lines: list[str], i: int, base: int) -> int:
    """Returns the index of the first line after the block indented deeper than `base` that starts
    at i (blank lines inside the block are part of it)."""
    while i < len(lines) and (not lines[i].strip() or indent_of(lines[i]) > base):
        i += 1
    return i


def is_prose(par: str) -> bool:
    if len(par) < 20:
        return False
    letters = sum(c.isalpha() or c == " " for c in par)
    if letters / len(par) < 0.85:
        return False
    return len(re.findall(r"[A-Za-z]{2,}", par)) >= 4


def rst_to_text(src: str) -> list[tuple[str, str]]:
    """Returns the headings ("h", text) and prose paragraphs ("p", text) of one reStructuredText
    file, in order."""
    lines = src.expandtabs(8).splitlines()
    out: list[tuple[str, str]] = []
    par: list[str] = []

    def flush(kind: str = "p") -> None:
        if par:
            text = inline(" ".join(par))
            if text.endswith("::"):
                text = text[:-2].rstrip()
                text = text + ":" if text and text[-1].isalnum() else text
            if kind == "h" and 3 <= len(text) <= 80 and re.search(r"[A-Za-z]{3}", text):
                out.append(("h", text))
            elif is_prose(text):
                out.append(("p", text))
            par.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        ind = indent_of(line)
        if not stripped:
            flush()
            i += 1
            continue
        m = DIRECTIVE_RE.match(line)
        if m:
            flush()
            name = m.group(1)
            i += 1
            if name in KEEP_BODY:
                # Skip the directive's options (":opt: value"), keep the body as ordinary lines.
                while i < len(lines) and lines[i].strip().startswith(":") and indent_of(lines[i]) > ind:
                    i += 1
                continue
            i = skip_block(lines, i, ind)
            continue
        if stripped.startswith(".. ") or stripped == "..":  # comment, label, footnote, substitution
            flush()
            i = skip_block(lines, i + 1, ind)
            continue
        if HEADING_RULE_RE.match(line):
            flush("h" if len(par) == 1 else "p")
            i += 1
            continue
        if stripped.startswith(("+-", "+=", "|")) or re.match(r"^=+(\s+=+)+\s*$", stripped):
            flush()  # table row or border
            i += 1
            continue
        if stripped.startswith((">>>", "...", "$ ", "% ", "C:\\>")):
            flush()
            i = skip_block(lines, i + 1, ind - 1 if ind else -1) if ind else i + 1
            while i < len(lines) and lines[i].strip():
                i += 1
            continue
        if BULLET_RE.match(stripped):
            flush()
            par.append(BULLET_RE.sub("", stripped))
            i += 1
            continue
        par.append(stripped)
        i += 1
        if stripped.endswith("::"):
            flush()
            # The literal block: the following lines indented deeper than this paragraph.
            while i < len(lines) and not lines[i].strip():
                i += 1
            i = skip_block(lines, i, ind)
    flush()
    return out


QUESTIONS = ("Tell me about {}.", "What is {}?", "Explain {}.", "Can you describe {}?",
             "I have a question about {}.", "Write a short note on {}.")


def section_chats(items: list[tuple[str, str]]) -> list[dict]:
    """One synthetic chat turn per section: the user asks about the heading (question template
    chosen by a stable hash of the heading), the assistant answers with the section's first
    paragraphs (at most ~600 characters, whole paragraphs)."""
    chats = []
    for k, (kind, heading) in enumerate(items):
        if kind != "h":
            continue
        answer: list[str] = []
        for kind2, text in items[k + 1:]:
            if kind2 != "p" or (answer and sum(map(len, answer)) + len(text) > 600):
                break
            answer.append(text)
        if answer:
            q = QUESTIONS[sum(heading.encode()) % len(QUESTIONS)].format(heading)
            chats.append({"user": q, "assistant": "\n".join(answer)})
    return chats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "data")
    args = ap.parse_args()
    if not args.src.is_dir():
        raise SystemExit(f"prepare_corpus: {args.src} not found (apt-get install python3.11-doc)")

    files = sorted(p for d in INCLUDE_DIRS for p in (args.src / d).rglob("*.rst.txt"))
    files += [args.src / f for f in INCLUDE_FILES]
    files = sorted(files, key=lambda p: str(p.relative_to(args.src)))
    splits: dict[str, list[str]] = {"train": [], "valid": [], "test": []}
    chats: dict[str, list[dict]] = {"train": [], "valid": [], "test": []}
    sources = {}
    for i, path in enumerate(files):
        split = "test" if i % 20 == 0 else "valid" if i % 20 == 10 else "train"
        items = rst_to_text(path.read_text(encoding="utf-8"))
        doc = "\n".join(text for _, text in items)
        rel = str(path.relative_to(args.src))
        sources[rel] = {"split": split, "chars": len(doc)}
        if doc:
            splits[split].append(doc)
        chats[split] += section_chats(items)
    args.out.mkdir(parents=True, exist_ok=True)
    for split, docs in splits.items():
        (args.out / f"{split}.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
        with open(args.out / f"chat_{split}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(c, ensure_ascii=False) + "\n" for c in chats[split])
        print(f"{split}: {len(docs)} files, {sum(len(d) for d in docs)} chars, {len(chats[split])} chats")
    with open(args.out / "sources.json", "w", encoding="utf-8") as f:
        json.dump({"src": str(args.src), "package": "python3.11-doc", "licence": "PSF License Agreement",
                   "files": sources}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
