#!/usr/bin/env python3
"""Checks that the code in kiln's documentation (README.md and docs/*.md) matches kiln.

Documentation that names a function kiln does not have (`add_plugin_layer` for `kiln::add_plugin`)
or a flag the command does not take (`kiln build -o` for `--save-engine`) fails this test, so the
guides cannot drift from the code. Registered with ctest as `docs_snippets` (tests/CMakeLists.txt).

    docs_snippets.py --source-dir DIR [--cxx g++] [--kiln build/kiln] [--jobs N]

1. C++: every ```cpp block is compiled with `<cxx> -std=c++20 -fsyntax-only -I DIR/include`,
   with #line directives so that errors point at the Markdown file and line. A block is
   * a *translation unit part*, taken as it is, when it has an `#include` or a line starting (at
     column 0) with namespace, class, struct, union, enum, template, extern, typedef or
     KILN_REGISTER_PLUGIN. The parts of one Markdown file form one translation unit, in order, so
     later parts see earlier parts' declarations (the plugin guide defines its plugin in one block
     and its creator in the next);
   * otherwise *statements*, compiled as the body of a function in a translation unit of their
     own that includes `<kiln/kiln.h>` alone (the umbrella header must be enough for what the
     guides show), with these placeholders in scope, standing for the reader's own objects:
     `network` (kiln::Network), `input`, `output`, `in`, `out` (void*), `stream` (void*, a
     cudaStream_t), `batch` (int64_t). A block declares anything else it uses.
   A block whose first line is `// not compiled: <reason>` is skipped; the test prints the reason.
   As a control, a snippet calling a function kiln does not declare must fail to compile, or the
   test fails (a broken compiler command would otherwise pass everything).
2. API names in prose: in the guides that teach the public API (API_GUIDES), an inline code span
   that names a function or member (`kiln::add_plugin`, `target_device()`, `Plugin::clone`,
   `workspace_size`: qualified, called, or snake_case) must name something declared in the
   installed interface (include/kiln/, and cmake/ for the CMake package's names) or in that
   guide's own code blocks. CUDA names (`cuda...`, `__half`), `std::` and the few names in
   INTERNAL_NAMES (named on purpose, with where they live) are exempt.
3. Commands (with --kiln): every `kiln ...` command line in code blocks (fenced sh/bash/console or
   untagged, and indented blocks) and in inline code spans: its subcommands must exist and each
   of its flags must appear in that subcommand's `--help`. A `kiln` line that is program output
   (`kiln: error: ...`) is not a command.

Exit status: 0 when everything compiles and every flag exists, 1 otherwise (with the compiler's
messages or the unknown flags, by file and line).
"""
import argparse
import concurrent.futures
import os
import re
import shlex
import subprocess
import sys
import tempfile

CPP_LANGS = {"cpp", "c++", "cxx"}
SHELL_LANGS = {"", "sh", "bash", "shell", "console", "text"}
TU_LINE = re.compile(r"^(#|namespace\b|class\b|struct\b|union\b|enum\b|template\b|extern\b|typedef\b"
                     r"|KILN_REGISTER_PLUGIN\b)")
OPT_OUT = re.compile(r"^\s*//\s*not compiled:\s*(.*)$")
PLACEHOLDERS = """\
namespace kiln_doc_placeholders {  // the reader's own objects in statement snippets
[[maybe_unused]] inline kiln::Network network;
[[maybe_unused]] inline void *input = nullptr, *output = nullptr, *in = nullptr, *out = nullptr;
[[maybe_unused]] inline void* stream = nullptr;  // a cudaStream_t
[[maybe_unused]] inline int64_t batch = 1;
}  // namespace kiln_doc_placeholders
"""
# Guides whose inline code is held to the public headers, and the non-public names they may use.
API_GUIDES = ["README.md", "docs/writing-a-plugin.md"]
INTERNAL_NAMES = {
    "plugin_version": "an ONNX node attribute the importer reads",
    "check_plugin": "kiln's own test entry point, named with its header src/plugins/plugin_check.h",
    "KILN_PLUGIN_PATH": "an environment variable the runtime reads (src/plugins/plugin_layer.cpp, docs/cli.md)",
    "source_format": "a ctest name (tests/CMakeLists.txt) that runs scripts/format.sh --check",
    "builder_optimization_level": "a Triton model parameter kiln's backend reads (serving/triton/triton_kiln.cpp, "
                                  "docs/serving.md)",
}
# The control: this must not compile, with this message (g++'s wording).
CONTROL_SNIPPET = "kiln::add_plugin_layer(network, {}, nullptr);\n"
CONTROL_MESSAGE = "'add_plugin_layer' is not a member of 'kiln'"


class Block:
    def __init__(self, path, line, lang, lines):
        self.path, self.line, self.lang, self.lines = path, line, lang, lines

    @property
    def text(self):
        return "".join(self.lines)


def parse_markdown(path, rel):
    """Fenced blocks (with the line of their first content line) and, outside them, indented
    code lines and inline code spans (text, line)."""
    blocks, spans = [], []
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if m:
            indent, fence, lang = len(m.group(1)), m.group(2), m.group(3).lower()
            body, start = [], i + 2
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence[:3]):
                body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
                i += 1
            blocks.append(Block(rel, start, lang, body))
            i += 1
            continue
        line = lines[i]
        if line.startswith("    ") and line.strip():
            blocks.append(Block(rel, i + 1, "", [line[4:]]))  # an indented code line
        else:
            for sm in re.finditer(r"(`+)(.+?)\1", line):
                spans.append((sm.group(2).strip(), i + 1))
        i += 1
    return blocks, spans


# ---- C++ ------------------------------------------------------------------------------------

def is_translation_unit_part(block):
    return any(TU_LINE.match(l) for l in block.lines)


def translation_units(blocks, path):
    """The sources for one Markdown file's C++ blocks: the translation-unit parts together, and
    the statement blocks together (each the body of a function that sees only <kiln/kiln.h>
    and the placeholders). A list of (name, source, number of blocks)."""
    parts = [b for b in blocks if is_translation_unit_part(b)]
    statements = [b for b in blocks if not is_translation_unit_part(b)]
    units = []
    if parts:
        source = f"// Generated by tests/docs_snippets.py from the C++ blocks of {path}.\n"
        source += "".join(f'#line {b.line} "{b.path}"\n{b.text}\n' for b in parts)
        units.append(("translation-unit part(s)", source, len(parts)))
    if statements:
        source = (f"// Generated by tests/docs_snippets.py from the C++ statement blocks of {path}.\n"
                  "#include <kiln/kiln.h>\n" + '#line 1 "<docs_snippets.py placeholders>"\n' + PLACEHOLDERS)
        for n, b in enumerate(statements):
            source += (f"[[maybe_unused]] static void kiln_doc_snippet_{n}() {{\n"
                       "  using namespace kiln_doc_placeholders;\n"
                       f'#line {b.line} "{b.path}"\n{b.text}\n}}\n')
        units.append(("statement block(s)", source, len(statements)))
    return units


def compile_source(cxx, include_dir, source, workdir, name):
    src = os.path.join(workdir, name + ".cpp")
    with open(src, "w", encoding="utf-8") as f:
        f.write(source)
    cmd = [cxx, "-std=c++20", "-fsyntax-only", "-I", include_dir, src]
    env = dict(os.environ, LC_ALL="C")  # ASCII quotes in messages, for the control's check
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    return r.returncode, r.stdout


def check_cpp(files, source_dir, cxx, jobs):
    """Returns the number of failures; prints a line per file."""
    include_dir = os.path.join(source_dir, "include")
    failures = 0
    units = {}
    for rel, blocks in files.items():
        cpp = []
        for b in blocks:
            if b.lang not in CPP_LANGS:
                continue
            m = OPT_OUT.match(b.lines[0]) if b.lines else None
            if m:
                print(f"{b.path}:{b.line}: C++ block not compiled: {m.group(1) or '(no reason given)'}")
                continue
            cpp.append(b)
        if cpp:
            units[rel] = cpp
    if not units:
        print("docs_snippets: no ```cpp block found: is --source-dir right?")
        return 1
    control = Block("<control snippet>", 1, "cpp", [CONTROL_SNIPPET])
    with tempfile.TemporaryDirectory(prefix="kiln_docs_snippets_") as work, \
            concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        pending = []
        for n, (rel, blocks) in enumerate(sorted(units.items())):
            for k, (kind, source, count) in enumerate(translation_units(blocks, rel)):
                job = pool.submit(compile_source, cxx, include_dir, source, work, f"doc{n}_{k}")
                pending.append((rel, kind, count, job))
        (_, control_source, _), = translation_units([control], "<control snippet>")
        control_job = pool.submit(compile_source, cxx, include_dir, control_source, work, "control")
        for rel, kind, count, job in pending:
            code, output = job.result()
            if code == 0:
                print(f"{rel}: {count} C++ {kind}: compiled")
            else:
                failures += 1
                print(f"{rel}: {count} C++ {kind}: FAILED to compile against include/:\n{output}")
        code, output = control_job.result()
        if code == 0 or CONTROL_MESSAGE not in output:
            failures += 1
            print(f"control: a snippet calling kiln::add_plugin_layer (not declared) must fail with "
                  f"\"{CONTROL_MESSAGE}\", but the compiler returned {code}:\n{output}")
        else:
            print("control: a snippet naming an undeclared function fails to compile, as it must")
    return failures


# ---- API names in prose ----------------------------------------------------------------------

def identifiers(text):
    return set(re.findall(r"[A-Za-z_]\w*", text))


def check_api_names(files, spans_by_file, source_dir):
    public = set()  # the installed interface: the headers and the CMake package
    for top in ("include", "cmake"):
        for root, _, names in os.walk(os.path.join(source_dir, top)):
            for n in names:
                with open(os.path.join(root, n), encoding="utf-8", errors="replace") as f:
                    public |= identifiers(f.read())
    failures, checked = 0, 0
    for rel in API_GUIDES:
        own = set().union(*(identifiers(b.text) for b in files.get(rel, []) if b.lang in CPP_LANGS | {"cmake"}))
        for span, line in spans_by_file.get(rel, []):
            m = re.match(r"^(kiln::)?([A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)(\(.*\))?;?$", span)
            if not m or not (m.group(1) or m.group(3) or "::" in m.group(2) or "_" in m.group(2)):
                continue
            name = m.group(2)
            if name.startswith(("cuda", "__", "std::")) or name in INTERNAL_NAMES:
                continue
            checked += 1
            missing = [p for p in name.split("::") if p not in public and p not in own]
            if missing:
                failures += 1
                print(f"{rel}:{line}: `{span}`: {', '.join(missing)} is declared in neither include/kiln/, cmake/ "
                      "nor this guide's code (a public name changed? else see INTERNAL_NAMES in "
                      "tests/docs_snippets.py)")
    print(f"API names in prose: {checked} checked in {', '.join(API_GUIDES)}, {failures} problem(s)")
    return failures


# ---- kiln command lines ---------------------------------------------------------------------

class Cli:
    """The `kiln` command's subcommands and flags, read from its --help."""

    def __init__(self, kiln):
        self.kiln, self.cache = kiln, {}

    def help(self, path):
        key = tuple(path)
        if key not in self.cache:
            r = subprocess.run([self.kiln, *path, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
            flags, subs, section = set(), set(), None
            for line in r.stdout.splitlines():
                if re.match(r"^\S.*:$", line):
                    section = line[:-1]
                    continue
                if section == "Options" and line.startswith("  "):
                    head = line.strip().split(" ")[0]
                    flags.update(f for f in head.split(",") if f.startswith("-"))
                elif section == "Subcommands" and line.startswith("  "):
                    subs.add(line.split()[0])
            self.cache[key] = (r.returncode, flags, subs)
        return self.cache[key]


def command_tokens(text):
    """Splits a shell line into commands (lists of words) at ; && || | and parentheses."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=True)
    lex.whitespace_split, lex.commenters = True, "#"
    try:
        words = list(lex)
    except ValueError:  # unbalanced quotes in prose: words as they are
        words = text.split()
    commands, current = [], []
    for w in words:
        if w and all(c in "();|&<>" for c in w):
            if current:
                commands.append(current)
            current = []
        else:
            current.append(w)
    if current:
        commands.append(current)
    return commands


def kiln_commands(text):
    for words in command_tokens(text):
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # VAR=value before the command
            words = words[1:]
        if words and words[0] == "$":
            words = words[1:]
        if words and (words[0] == "kiln" or words[0].endswith("/kiln")):
            yield words[1:]


def check_command(cli, args, strict):
    """Problems with one `kiln ARGS` command line (empty when fine). `kiln build/run --x` (prose
    for both) checks --x in each. Not `strict` (inline code in prose): a span whose first word is
    no subcommand is not a command (`kiln engine '<source>':`, a message prefix) and is skipped."""
    if args and "/" in args[0] and not args[0].startswith(("-", "/", ".")):
        return [p for alt in args[0].split("/") for p in check_command(cli, [alt] + args[1:], strict)]
    path = []
    code, flags, subs = cli.help(path)
    if code != 0:
        return [f"`{cli.kiln} --help` failed"]
    rest = list(args)
    while rest and rest[0] in subs:
        path.append(rest.pop(0))
        code, flags, subs = cli.help(path)
    name = " ".join(["kiln"] + path)
    if rest and subs and not rest[0].startswith("-"):
        if not strict:
            return []
        return [f"`{name}` has no subcommand '{rest[0]}' (it has: {', '.join(sorted(subs))})"]
    problems = []
    for w in rest:
        w = w.strip("[]{}'\",")
        if re.match(r"^--?[A-Za-z]", w):
            flag = w.split("=", 1)[0]
            if flag not in flags:
                problems.append(f"`{name}` has no flag {flag} (see `{name} --help`)")
    return problems


def check_commands(files, spans_by_file, kiln):
    cli, failures, checked = Cli(kiln), 0, 0
    for rel in sorted(files):
        lines = []  # (text, line, strict)
        for b in files[rel]:
            if b.lang not in SHELL_LANGS:
                continue
            text, start = "", None
            for k, l in enumerate(b.lines):
                if start is None:
                    start = b.line + k
                if l.rstrip("\n").endswith("\\"):
                    text += l.rstrip("\n")[:-1] + " "
                    continue
                lines.append((text + l, start, True))
                text, start = "", None
            if text:
                lines.append((text, start, True))
        lines += [(s, n, False) for s, n in spans_by_file.get(rel, []) if re.match(r"^(\$ )?(\S*/)?kiln ", s)]
        for text, line, strict in lines:
            for args in kiln_commands(text):
                checked += 1
                for p in check_command(cli, args, strict):
                    failures += 1
                    print(f"{rel}:{line}: {p}\n    {text.strip()}")
    print(f"kiln command lines: {checked} checked against `kiln ... --help`, {failures} problem(s)")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    parser.add_argument("--kiln", help="the kiln command, to check the command lines (skipped without it)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    docs = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(args.source_dir, "docs"))
                                  if f.endswith(".md"))
    files, spans = {}, {}
    for rel in docs:
        files[rel], spans[rel] = parse_markdown(os.path.join(args.source_dir, rel), rel)

    failures = check_cpp(files, args.source_dir, args.cxx, args.jobs)
    failures += check_api_names(files, spans, args.source_dir)
    if args.kiln:
        failures += check_commands(files, spans, args.kiln)
    else:
        print("kiln command lines: not checked (no --kiln)")
    print("docs_snippets: " + ("PASSED" if failures == 0 else f"FAILED ({failures} problem(s))"))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
