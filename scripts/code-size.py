#!/usr/bin/env python3
"""Counts what structure reviews ask about: functions longer than N lines, files
longer than M lines, and the places that read an environment variable, under src/.

A small C++ scanner (comments, strings and character literals blanked; braces matched): a
function is a brace block at namespace or class scope whose head ends in a parameter list (plus
qualifiers, a trailing return type or a constructor's initializer list). Lambdas and blocks
inside a function count towards that function. Lines are counted from the head's line to the
closing brace.

  scripts/code-size.py [--func-lines 80] [--file-lines 700] [--list] [ROOT]
"""
import argparse
import pathlib
import re
import sys

CONTROL = {"if", "for", "while", "switch", "catch", "do", "else", "try", "return"}


def blank(text):
    """Comments and literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            k = i
            while k > 0 and (text[k - 1].isalnum() or text[k - 1] in "'."):
                k -= 1
            if c == "'" and k < i and text[k].isdigit() and text[i + 1 : i + 2].isalnum():
                out.append(c)  # digit separator 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i : j + 1]))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def is_function_head(head):
    head = re.sub(r"\s+", " ", head).strip()
    if not head or head.startswith("#"):
        return None
    # A constructor's initializer list: cut at the top-level ':' after the parameter list.
    m = re.search(r"\)\s*(?:const|noexcept|override|final|mutable|&|&&|\s)*(?:->[^{]*)?$", head)
    if not m:
        init = re.search(r"\)\s*(?:noexcept\s*)?:\s*[A-Za-z_]", head)
        if not init:
            return None
        head = head[: init.start() + 1]
    name = re.search(r"([~A-Za-z_][\w:~<>=!+\-*/\[\]&|^%]*)\s*\(", head)
    if not name:
        return None
    word = name.group(1).split("::")[-1]
    if word in CONTROL or head.rstrip().endswith("]") or re.search(r"\]\s*\(", head[: name.start() + 1]):
        return None
    if re.search(r"=\s*\[", head):  # a lambda assigned at namespace scope
        return None
    return name.group(1)


def functions(path):
    raw = path.read_text(errors="replace")
    text = blank(raw)
    line_of = [0] * (len(text) + 1)
    ln = 1
    for i, ch in enumerate(text):
        line_of[i] = ln
        if ch == "\n":
            ln += 1
    stack = []  # (kind, name, start_line)
    head_start = 0
    found = []
    for i, ch in enumerate(text):
        if ch == "{":
            in_func = any(k == "func" for k, _, _ in stack)
            head = text[head_start:i]
            kind = "block"
            name = None
            if not in_func:
                name = is_function_head(head.split("\n#")[-1] if "\n#" in head else head)
                if name:
                    kind = "func"
            start = line_of[head_start + len(head) - len(head.lstrip())] if head.strip() else line_of[i]
            stack.append((kind, name, start))
            head_start = i + 1
        elif ch == "}":
            if stack:
                kind, name, start = stack.pop()
                if kind == "func":
                    found.append((name, start, line_of[i]))
            head_start = i + 1
        elif ch == ";":
            head_start = i + 1
        elif ch == "\n" and text[head_start:i].lstrip().startswith("#"):
            head_start = i + 1  # a preprocessor line is not part of the next head
        elif ch == ":" and text[i - 6 : i + 1] in ("public:", "ivate:") or text[i - 9 : i + 1] == "protected:":
            head_start = i + 1
    return found


# A read of the environment: getenv, or util/env's env_value (whose own getenv is not counted).
ENV_RE = re.compile(r"\b(?:std::)?(?:secure_)?getenv\s*\(|\benv_value\s*\(")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default="src")
    ap.add_argument("--func-lines", type=int, default=80)
    ap.add_argument("--file-lines", type=int, default=700)
    ap.add_argument("--list", action="store_true", help="name each long function and file")
    a = ap.parse_args()
    files = sorted(p for p in pathlib.Path(a.root).rglob("*") if p.suffix in (".cpp", ".h", ".cc", ".hpp"))
    long_funcs, long_files, env_reads = [], [], []
    for p in files:
        n_lines = p.read_text(errors="replace").count("\n")
        if n_lines > a.file_lines:
            long_files.append((n_lines, str(p)))
        for name, b, e in functions(p):
            if e - b + 1 > a.func_lines:
                long_funcs.append((e - b + 1, f"{p}:{b}", name))
        for k, line in enumerate(blank(p.read_text(errors="replace")).splitlines(), 1):
            if ENV_RE.search(line) and not (p.stem == "env" and p.parent.name == "util"):
                env_reads.append(f"{p}:{k}")
    print(f"functions over {a.func_lines} lines: {len(long_funcs)}")
    if a.list:
        for n, where, name in sorted(long_funcs, reverse=True):
            print(f"  {n:5d}  {name}  {where}")
    print(f"files over {a.file_lines} lines: {len(long_files)}")
    if a.list:
        for n, where in sorted(long_files, reverse=True):
            print(f"  {n:5d}  {where}")
    print(f"places reading an environment variable: {len(env_reads)}")
    if a.list:
        for where in env_reads:
            print(f"  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
