"""Checks README.md and docs/*.md against the code, cheaply (no training): tests/e2e/test_docs.sh runs it.

  docs_check.py --src SRC --loom LOOM --work DIR

1. docs/config.md's config reference is exactly what `loom config --reference` prints.
2. Every config key written as `section.key` (prose, code, YAML blocks) is a key of that reference.
3. Every relative link points at a file that exists, and its #anchor at a heading of that page; every guide
   in docs/ is linked from the README.
4. Every repository path in backticks (configs/..., scripts/..., models/..., ...) or in a shell block
   (configs/, scripts/, tests/) exists.
5. Every `loom SUBCOMMAND` shown is a subcommand of `loom --help`, and every --flag given to it is one that
   subcommand accepts: its flags are tried as `loom SUB --flag=x ... --zz-docs-probe`, which the CLI's own
   argument parser refuses before doing anything, naming the first option it does not know. A
   `--flag` in prose, outside a command, is one that cli/ or scripts/ spells.
Prints one line per problem (file:line: what) and exits 1 if there are any.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import yaml

SECTIONS = ("run", "model", "data", "tokenizer", "optim", "schedule", "train", "decode", "precision", "parallel",
            "checkpoint", "runtime")
# `model.safetensors`, `tokenizer.json`, `train.bin`: file names that look like section.key.
FILE_EXTENSIONS = {"safetensors", "json", "bin", "txt", "es", "en", "hyp", "idx", "mask", "tiktoken", "yaml", "jsonl",
                   "gz", "zst", "py", "sh", "h", "cpp", "log", "png", "md", "model"}
REPO_DIRS = ("configs", "scripts", "tests", "models", "core", "data", "parallel", "train", "optim", "cli", "docs",
             ".ci")
SHELL_REPO_DIRS = ("configs", "scripts", "tests", "docs")
PROBE = "--zz-docs-probe"
# A code span that is a command: `loom encode --info`, `mpirun -np 2 build/loom train ...`.
command_span = re.compile(r"^(?:mpirun\s.*?\s)?(?:build/|bundle/)?loom\s+([a-z][a-z-]*)(.*)$")

problems = []


def problem(path, line, what):
    problems.append(f"{path}:{line}: {what}")


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def code_blocks(text):
    """(language, body, first line number of the body) of every fenced block."""
    for m in re.finditer(r"^( *)```(\w*)\n(.*?)^\1```", text, flags=re.M | re.S):
        yield m.group(2), m.group(3), line_of(text, m.start(3))


def inline_spans(text):
    """(content, line) of every `code span` outside fenced blocks."""
    prose = re.sub(r"^( *)```.*?^\1```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.M | re.S)
    for m in re.finditer(r"`([^`]+)`", prose):  # a span may wrap onto the next line
        yield " ".join(m.group(1).split()), line_of(prose, m.start())


def slug(heading):
    """GitHub's anchor for a heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    text = open(path).read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", text, flags=re.M)}


def check_reference(src, reference):
    text = open(os.path.join(src, "docs/config.md")).read()
    m = re.search(r"<!-- config-reference:begin -->\n(.*?)\n<!-- config-reference:end -->", text, flags=re.S)
    if not m:
        problem("docs/config.md", 1, "no <!-- config-reference:begin/end --> block")
    elif m.group(1) != reference.rstrip("\n"):
        problem("docs/config.md", line_of(text, m.start()),
                "config reference is stale: run scripts/sync_docs.sh (it pastes `loom config --reference`)")


def check_keys(rel, text, keys):
    pattern = r"(?<![\w./$-])(" + "|".join(SECTIONS) + r")\.([a-z0-9_]+)(\*?)(?!\.\w)(?![\w-])"
    for m in re.finditer(pattern, text):
        section, name, star = m.groups()
        key = f"{section}.{name}"
        if star:
            if not any(k.startswith(key) for k in keys):
                problem(rel, line_of(text, m.start()), f"no config key starts with {key}")
        elif key not in keys and name not in FILE_EXTENSIONS:
            problem(rel, line_of(text, m.start()), f"{key} is not a config key (loom config --reference)")
    for language, body, first in code_blocks(text):
        if language != "yaml":
            continue
        try:
            doc = yaml.safe_load(body)
        except yaml.YAMLError as e:
            problem(rel, first, f"YAML block does not parse: {e}")
            continue
        if not isinstance(doc, dict) or not set(doc) <= set(SECTIONS):
            continue  # not a loom config (a chat template, ...)
        for section, values in doc.items():
            for name in (values or {}):
                if f"{section}.{name}" not in keys:
                    problem(rel, first, f"YAML block: {section}.{name} is not a config key")


def check_links(src, rel, text):
    here = os.path.dirname(os.path.join(src, rel))
    for m in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        file = os.path.normpath(os.path.join(here, path)) if path else os.path.join(src, rel)
        if not os.path.exists(file):
            problem(rel, line_of(text, m.start()), f"link to {target}: {path} does not exist")
        elif anchor and file.endswith(".md") and anchor not in anchors(file):
            problem(rel, line_of(text, m.start()),
                    f"link to {target}: no heading #{anchor} in {os.path.relpath(file, src)}")


def exists_in_repo(src, path):
    path = path.rstrip(".,:;)")
    for expanded in expand_braces(path):
        if glob.glob(os.path.join(src, expanded)):
            return True
    return False


def expand_braces(path):
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [e for part in m.group(1).split(",") for e in expand_braces(path[:m.start()] + part + path[m.end():])]


def check_paths(src, rel, text):
    repo_path = re.compile(r"^(?:" + "|".join(re.escape(d) for d in REPO_DIRS) + r")/[\w.*{},/-]*$")
    for span, line in inline_spans(text):
        for word in span.split():
            if repo_path.match(word) and not exists_in_repo(src, word):
                problem(rel, line, f"`{word}`: no such file or directory in the repository")
    shell_path = re.compile(r"(?<![\w./-])((?:" + "|".join(SHELL_REPO_DIRS) + r")/[\w.*/-]+)")
    for language, body, first in code_blocks(text):
        if language not in ("sh", "bash"):
            continue
        for i, line in enumerate(body.split("\n")):
            for m in shell_path.finditer(line.split(" #")[0]):
                if not exists_in_repo(src, m.group(1)):
                    problem(rel, first + i, f"{m.group(1)}: no such file or directory in the repository")


def loom_commands(text):
    """(subcommand, [flags], line) of every loom invocation in shell blocks and code spans."""
    found = []
    invocation = re.compile(r"(?:^|[\s|;(&])(?:build/|bundle/)?loom\s+([a-z][a-z-]*)([^|<>;&\n]*)")
    flags = lambda args: re.findall(r"(?<!\S)--([a-z][\w-]*)", args)
    for language, body, first in code_blocks(text):
        if language not in ("sh", "bash"):
            continue
        # Comments go; continuation lines join their command (whose line number is the first's).
        lines = [re.sub(r"(^|\s)#.*", "", line) for line in body.split("\n")]
        joined = "\n".join(lines).replace("\\\n", "  ")
        for m in invocation.finditer(joined):
            found.append((m.group(1), flags(m.group(2)), first + joined.count("\n", 0, m.start(1))))
    for span, line in inline_spans(text):
        m = command_span.match(span)
        if m:
            found.append((m.group(1), flags(m.group(2)), line))
    return found


def check_bare_flags(rel, text, sources):
    """A `--flag` in prose, outside a loom command, still names a flag of loom (cli/) or of a script."""
    for span, line in inline_spans(text):
        if command_span.match(span):
            continue
        for flag in re.findall(r"(?<!\S)--([a-z][\w-]*)", span):
            if f"--{flag}" not in sources and f'"{flag}"' not in sources:
                problem(rel, line, f"--{flag}: no loom subcommand (cli/) or script (scripts/) has this option")


def refused(loom, work, sub, argv):
    """The option `loom SUB ARGV... --zz-docs-probe` stops at: its parser names the first one it does not know."""
    run = subprocess.run([loom, sub, *argv, PROBE], cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, timeout=60)
    out = run.stdout + run.stderr
    m = re.search(r"unknown option (--[\w-]+)", out)
    if not m:
        raise RuntimeError(f"loom {sub} {' '.join(argv)} {PROBE} did not refuse an option:\n{out}")
    return m.group(1)


def rejected_flags(loom, work, sub, flags):
    """The flags `loom SUB` does not take: all at once (one process), then one by one if one is refused."""
    if refused(loom, work, sub, [f"--{f}=x" for f in flags]) == PROBE:
        return []
    # --flag=x, and --flag alone for a command that looks for the exact word (`loom config --reference`).
    return [f for f in flags if refused(loom, work, sub, [f"--{f}=x"]) != PROBE and
            refused(loom, work, sub, [f"--{f}"]) != PROBE]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", required=True)
    parser.add_argument("--loom", required=True)
    parser.add_argument("--work", required=True)
    a = parser.parse_args()
    src = a.src
    reference = subprocess.run([a.loom, "config", "--reference"], capture_output=True, text=True, check=True).stdout
    keys = set(re.findall(r"^\| `([a-z_]+\.[a-z0-9_]+)` \|", reference, flags=re.M))
    assert len(keys) > 50, f"only {len(keys)} keys in loom config --reference"
    usage = subprocess.run([a.loom, "--help"], capture_output=True, text=True).stdout
    subcommands = set(re.findall(r"^  ([a-z][a-z-]*) ", usage, flags=re.M))
    assert {"train", "prepare", "config"} <= subcommands, f"loom --help lists {sorted(subcommands)}"

    pages = ["README.md"] + sorted(os.path.relpath(p, src) for p in glob.glob(os.path.join(src, "docs/*.md")))
    assert len(pages) > 5, f"only {pages}"
    check_reference(src, reference)
    readme = open(os.path.join(src, "README.md")).read()
    for page in pages[1:]:
        if f"]({page})" not in readme and f"]({page}#" not in readme:
            problem("README.md", 1, f"{page} is not linked from the README")
    sources = "".join(open(f, errors="replace").read()
                      for f in glob.glob(os.path.join(src, "cli/*")) + glob.glob(os.path.join(src, "scripts/*")))
    wanted = {}  # (subcommand, flag) -> first place it is shown
    for rel in pages:
        text = open(os.path.join(src, rel)).read()
        check_keys(rel, text, keys)
        check_links(src, rel, text)
        check_paths(src, rel, text)
        check_bare_flags(rel, text, sources)
        for sub, flags, line in loom_commands(text):
            if sub not in subcommands:
                problem(rel, line, f"loom {sub}: not a loom subcommand (loom --help)")
                continue
            for flag in flags:
                if flag != "set":
                    wanted.setdefault((sub, flag), (rel, line))
    assert len(wanted) > 20, f"only {len(wanted)} (subcommand, flag) pairs found in the pages' commands"
    by_subcommand = {}
    for sub, flag in wanted:
        by_subcommand.setdefault(sub, []).append(flag)
    with ThreadPoolExecutor(max_workers=2) as pool:
        rejected = pool.map(lambda item: (item[0], rejected_flags(a.loom, a.work, *item)), by_subcommand.items())
        for sub, flags in rejected:
            for flag in flags:
                problem(*wanted[(sub, flag)], f"loom {sub} does not take --{flag}")
    for p in problems:
        print(p)
    print(f"{len(pages)} pages, {len(keys)} config keys, {len(wanted)} (subcommand, flag) pairs probed: "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
