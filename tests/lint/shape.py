#!/usr/bin/env python3
"""The shape rules of src/ (docs/architecture.md): no function longer than 70 lines, tests
and test helpers included, and no source file longer than 900 lines before its inline
`#[cfg(test)] mod tests`. Prints every offender and exits 1 when there is one.

usage: tests/lint/shape.py [DIR...]   (default: src)

Rust is read as text: comments, strings (raw ones too) and char literals are blanked first, so
braces inside them do not count; a function runs from its `fn` line to its closing brace.
"""
import os
import re
import sys

MAX_FUNCTION_LINES = 70
MAX_FILE_LINES = 900


def blank(match):
    return re.sub(r"[^\n]", " ", match.group(0))


def code_only(src):
    """`src` with comments, strings and char literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i) + 2
        elif (m := re.match(r'b?r(#*)"', src[i:i + 130])) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            term = '"' + m.group(1)
            j = src.find(term, i + len(m.group(0))) + len(term)
        elif src[i] == '"' or src.startswith('b"', i) and (i == 0 or not src[i - 1].isalnum()):
            j = i + (2 if src[i] == "b" else 1)
            while src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
        elif (m := re.match(r"b?'(\\u\{[0-9a-fA-F]+\}|\\x..|\\.|[^\\'])'", src[i:i + 14])):
            j = i + len(m.group(0))
        else:
            out.append(src[i])
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", src[i:j]))
        i = j
    return "".join(out)


def long_functions(path, code):
    for m in re.finditer(r"\bfn\s+(\w+)", code):
        depth, start, j = 0, None, m.end()
        while j < len(code):
            c = code[j]
            if c == ";" and start is None:
                break
            if c == "{":
                start = j if start is None else start
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if start is None:
            continue
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, j) + 1
        if last - first + 1 > MAX_FUNCTION_LINES:
            yield f"{path}:{first}: fn {m.group(1)} is {last - first + 1} lines (at most {MAX_FUNCTION_LINES})"


def lines_before_tests(text):
    lines = text.split("\n")
    for i, line in enumerate(lines[:-1]):
        if line.startswith("#[cfg(test)]") and re.match(r"mod tests\s*\{", lines[i + 1]):
            return i
    return len(lines)


def main(dirs):
    problems = []
    for root in dirs:
        for dirpath, _, files in sorted(os.walk(root)):
            for name in sorted(files):
                if not name.endswith(".rs"):
                    continue
                path = os.path.join(dirpath, name)
                text = open(path, encoding="utf-8").read()
                problems.extend(long_functions(path, code_only(text)))
                n = lines_before_tests(text)
                if n > MAX_FILE_LINES:
                    problems.append(f"{path}: {n} lines before its inline tests (at most {MAX_FILE_LINES})")
    for p in problems:
        print(p)
    if problems:
        print(f"shape: {len(problems)} problem(s): split by meaning (docs/architecture.md)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["src"]))
