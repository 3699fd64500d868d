"""Every command, file path, config option and link that README.md and the pages of docs/ name exists.

Where names are read (the extraction rules):

- **Code spans** (`` `...` ``, any number of backticks, also across a line break) outside fenced blocks,
  with ``\\|`` read as ``|`` (a table cell's escape). Words are split as the shell splits them.
- **Command lines of fenced blocks**: each line of a ``bash`` block (``\\`` continuations joined,
  comments dropped) and each ``$ `` line of a ``console`` block, those marked
  ``<!-- readme-test: skip -->`` included (a GPU-only line names real things too). Other fenced
  blocks (python, yaml, output, trees) are not read.
- **Links and images** ``[...](target)`` outside fenced blocks.

What each name must be:

- **A command**: a command line's or code span's first word (after ``NAME=value`` environment words
  and a ``.venv/bin/`` prefix). ``attnlab-<name>`` is a console script of pyproject.toml, and a
  ``--flag`` after an argparse command (attnlab-report, attnlab-consolidate) one of its parser's;
  ``make <target>`` a target of the Makefile; ``python -m <module>`` (also after torchrun or srun) a
  module of the repository. ``python -m attnlab.train ...`` and ``make train ARGS="..."`` are
  ``attnlab-train ...``.
- **A file path**: a word (or an override's value) starting with ``src/``, ``conf/``,
  ``experiments/``, ``benchmarks/``, ``docs/``, ``tests/`` or ``attnlab/`` (read as ``src/attnlab/``)
  exists in the repository. ``*`` is a wildcard; a path with a ``<placeholder>`` is made at run time, so
  only the folders before its first placeholder must exist; ``file.py::name`` names a function or class
  of that file (``*`` allowed).
- **A config option** (``key=value``; ``+key``, ``++key``, ``~key`` too): on a command line of a Hydra
  command (``conf/<command>.yaml``), the key is a group whose options include the value (each of
  ``a,b`` or ``a|b``), or a key of the config that command composes with that line's group choices
  (``model=vit``, ``hydra/launcher=slurm``, each value of a sweep); a key under a node that the command
  leaves open until it reads a checkpoint (attnlab-eval's ``data.*``) as in a code span alone. A code
  span made only of ``key=value`` words names options of any command: each key is a key of some
  command's config, or of attnlab-train's with one choice of the group it falls under (``model.image_size``
  with ``model=vit_schema``: a typed group is tried by its schemas, whose keys its presets only set).
  A console line that the page shows ending in an ``error:`` line is a bad config on purpose: its
  options are not checked (tests/test_readme.py checks it fails as shown). A word whose value holds
  ``=`` (a run's name) or is Python's ``True``, ``False`` or ``None`` (a keyword argument) is no option.
- **A link**: its file exists, relative to the page; its ``#anchor`` is a heading of that file.

Configs are composed with ``hydra.compose`` in this process, once per command and set of group
choices. ``HYPOTHETICAL`` lists the few names that are deliberately not real, each with why.
"""

from __future__ import annotations

import fnmatch
import functools
import glob
import importlib
import itertools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.object_type import ObjectType
from omegaconf import OmegaConf

from attnlab.run.configs import register_schemas

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
MAKE_TARGETS = set(re.findall(r"^([\w-]+)(?:\s+[\w-]+)*\s*:", (ROOT / "Makefile").read_text(), flags=re.M))
HYDRA_COMMANDS = {p.stem for p in CONF.glob("*.yaml")}  # attnlab-train composes conf/train.yaml, ...

# Names that are deliberately not real, and why. Keep it short: anything else must exist.
HYPOTHETICAL = {
    "model=tinygpt": "architecture.md's worked example: the family a user adds (tests/cli/extension/)",
    "pos=linear": "architecture.md's worked example: the positional encoding a user adds",
    "conf/pos/linear.yaml": "the worked example's file, in the user's own conf/ (tests/cli/extension/conf/)",
    "conf/model/tinygpt.yaml": "the worked example's file, in the user's own conf/ (tests/cli/extension/conf/)",
}
# Pages linked before their branch is merged, and who writes them (remove once they exist).
PENDING: dict[str, str] = {}  # a page a parallel branch writes, linked before it lands: its reason

PATH_ROOTS = ("src/", "conf/", "experiments/", "benchmarks/", "docs/", "tests/", "attnlab/")
OVERRIDE = re.compile(
    r"^(?P<prefix>\+\+|\+|~)?(?P<key>[a-z_][\w.@/-]*)=(?P<value>(?!True$|False$|None$)[^=]*)$", re.S
)
ENV_WORD = re.compile(r"^[A-Z_][A-Z0-9_]*=")
SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w-]*)")
PLACEHOLDER = re.compile(r"<[^>]*>")
SKIP_MARK = "<!-- readme-test: skip"


@dataclass(frozen=True)
class Mention:
    """One place a page names things: a code span, a command line of a fenced block, or a link."""

    page: str
    line: int
    kind: str  # "span", "command" or "link"
    text: str
    fails_on_purpose: bool = False  # a console line the page shows ending in an error line

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text[:90]}"


def mentions(page: str, text: str) -> list[Mention]:
    """The code spans, fenced command lines and links of a page, in order (the rules above)."""
    found: list[Mention] = []
    lines = text.splitlines()
    fence, info, pending, prose, prose_start = None, "", "", [], 0

    def flush_prose() -> None:
        paragraph = "\n".join(prose)
        for match in SPAN.finditer(paragraph):
            line = prose_start + paragraph.count("\n", 0, match.start())
            span = match.group(2).replace("\n", " ").replace("\\|", "|").strip()
            found.append(Mention(page, line, "span", span))
        for match in LINK.finditer(SPAN.sub("", paragraph)):
            found.append(Mention(page, prose_start, "link", match.group(1)))
        prose.clear()

    for number, line in enumerate(lines, 1):
        opening = FENCE.match(line)
        if fence is None:
            if opening:
                flush_prose()
                fence, info = opening.group(1), opening.group(2)
            elif line.strip():
                prose_start = prose_start if prose else number
                prose.append(line)
            else:
                flush_prose()
            continue
        if opening and line.strip().startswith(fence[:3]) and not opening.group(2):
            fence = None
        elif info == "bash" and not line.lstrip().startswith("#"):
            pending += line.removesuffix("\\") + " "
            if not line.endswith("\\"):
                command = " ".join(_words(pending, comments=True))
                if command:
                    found.append(Mention(page, number, "command", command))
                pending = ""
        elif info == "console" and line.startswith("$ "):
            found.append(Mention(page, number, "command", line[2:]))
        elif info == "console" and line.startswith("error: ") and found and found[-1].line == number - 1:
            last = found.pop()
            found.append(Mention(last.page, last.line, last.kind, last.text, fails_on_purpose=True))
    flush_prose()
    return found


def _words(text: str, comments: bool = False) -> list[str]:
    try:
        return shlex.split(text, comments=comments)
    except ValueError:  # an unbalanced quote in prose: plain words
        return text.split()


# --- commands -------------------------------------------------------------------------------------


@dataclass
class Invocation:
    """A command line read as a program and its arguments: the attnlab command it runs (or None)."""

    program: str
    args: list[str]
    command: str | None = None  # "train", "eval", ... for a Hydra command; "report", ... for argparse


def invocation(words: list[str]) -> Invocation | None:
    """The program a command line or code span starts with, or None where it starts with no program
    (a lone ``key=value``, a path, prose)."""
    words = list(itertools.dropwhile(ENV_WORD.match, words))
    if not words:
        return None
    program, *args = words
    program = program.removeprefix(".venv/bin/")
    if program.startswith("attnlab-"):
        return Invocation(program, args, program.removeprefix("attnlab-"))
    if program == "make":
        extra = [a.removeprefix("ARGS=") for a in args if a.startswith("ARGS=")]
        command = "train" if args[:1] == ["train"] else None
        return Invocation(program, _words(extra[0]) if extra and command else args, command)
    if program in ("python", "python3", "torchrun", "srun"):
        if "-m" in args and args.index("-m") + 1 < len(args):
            module = args[args.index("-m") + 1]
            rest = args[args.index("-m") + 2 :]
            command = module.removeprefix("attnlab.") if module in ("attnlab.train", "attnlab.eval") else None
            command = "sample" if module == "attnlab.sample" else command
            return Invocation(program, [f"-m {module}", *rest], command)
        return Invocation(program, args)
    return None


def module_exists(module: str) -> bool:
    parts = module.split(".")
    for base in (ROOT / "src", ROOT):
        target = base.joinpath(*parts)
        if target.with_suffix(".py").is_file() or (target / "__init__.py").is_file():
            return True
    return False


@functools.cache
def argparse_flags(command: str) -> set[str] | None:
    """The option strings of an argparse command's ``parser()``, or None for another kind."""
    module = importlib.import_module(SCRIPTS[f"attnlab-{command}"].split(":")[0])
    if not hasattr(module, "parser"):
        return None
    return {flag for action in module.parser()._actions for flag in action.option_strings}


def command_problems(call: Invocation) -> list[str]:
    if call.program.startswith("attnlab-"):
        if call.program not in SCRIPTS:
            return [f"{call.program}: not a console script of pyproject.toml"]
        if call.command not in HYDRA_COMMANDS and (flags := argparse_flags(call.command)) is not None:
            unknown = [
                a.split("=")[0] for a in call.args if a.startswith("--") and a.split("=")[0] not in flags
            ]
            return [f"{call.program} {flag}: not an option of its parser" for flag in unknown]
    if call.program == "make":
        target = next((a for a in call.args if "=" not in a), None) if call.command is None else "train"
        if target is not None and target not in MAKE_TARGETS:
            return [f"make {target}: not a target of the Makefile"]
    if call.args[:1] and call.args[0].startswith("-m "):
        module = call.args[0].removeprefix("-m ")
        if not module_exists(module):
            return [f"-m {module}: no such module in the repository"]
    return []


# --- paths ----------------------------------------------------------------------------------------


def path_words(words: list[str]) -> list[str]:
    """The words (and override values) that name a path of the repository."""
    candidates = [m.group("value") if (m := OVERRIDE.match(w)) else w for w in words]
    candidates = [c.removeprefix("./").rstrip(".,;:)") for c in candidates]
    return [c for c in candidates if c.startswith(PATH_ROOTS) and "${" not in c]


def path_problem(path: str) -> str | None:
    if path in HYPOTHETICAL or path in PENDING:
        return None
    file, _, member = path.partition("::")
    file = "src/" + file if file.startswith("attnlab/") else file
    if PLACEHOLDER.search(file):
        fixed = file[: PLACEHOLDER.search(file).start()].rpartition("/")[0]
        matches = glob.glob(str(ROOT / fixed)) if "*" in fixed else [str(ROOT / fixed)]
        return None if any(Path(m).is_dir() for m in matches) else f"{path}: no folder {fixed}/"
    matches = (
        glob.glob(str(ROOT / file)) if "*" in file else ([str(ROOT / file)] if (ROOT / file).exists() else [])
    )
    if not matches:
        return f"{path}: no such file or folder"
    if member:
        defined = {
            name
            for m in matches
            for name in re.findall(r"^\s*(?:async def|def|class) (\w+)", Path(m).read_text(), re.M)
        }
        if not fnmatch.filter(defined, member.split("[")[0]):
            return f"{path}: {file} defines no {member}"
    return None


# --- config options -------------------------------------------------------------------------------


def flat_keys(node, prefix: str = "") -> set[str]:
    keys = set()
    if isinstance(node, dict):
        for key, value in node.items():
            full = f"{prefix}{key}"
            keys.add(full)
            keys |= flat_keys(value, f"{full}.")
    return keys


class Configs:
    """The keys of each command's config per set of group choices, composed once each."""

    def __init__(self) -> None:
        loader = GlobalHydra.instance().config_loader()
        self.groups: dict[str, list[str]] = {}
        pending = [""]
        while pending:
            parent = pending.pop()
            for name in loader.list_groups(parent):
                group = f"{parent}/{name}" if parent else name
                self.groups[group] = loader.get_group_options(group, results_filter=ObjectType.CONFIG)
                pending.append(group)
        self.open_nodes = {"data", "model"}  # attnlab-eval's and -sample's: typed by the checkpoint
        self.seen: set[str] = set()  # every key of attnlab-train composed so far, under any choices

    @functools.cache  # noqa: B019 (one instance per test module)
    def keys(self, command: str, choices: tuple[str, ...] = ()) -> frozenset[str]:
        cfg = compose(command, overrides=list(choices), return_hydra_config=True)
        keys = frozenset(flat_keys(OmegaConf.to_container(cfg, resolve=False)))
        if command == "train":
            self.seen |= keys
        return keys

    def search_order(self, key: str) -> list[tuple[str, str]]:
        """(group, option) pairs of attnlab-train under which the key may exist: the options of the
        group it starts with (``model.pos.*``: also ``pos``; ``hydra.*``: Hydra's groups and
        ``hparams_search``), as conf/ holds them."""
        first = key.split(".")[0]
        groups = [first] if first != "hydra" else [g for g in self.groups if g.startswith("hydra/")]
        groups += ["pos"] if key.startswith("model.pos.") else ["hparams_search"] if first == "hydra" else []
        return [
            (group, option)
            for group in groups
            if group in self.groups
            for option in sorted(self.groups[group])
            if not option.startswith("_") and not option.endswith("_schema")
        ]

    @functools.cache  # noqa: B019
    def known_anywhere(self, key: str) -> bool:
        """A key of some command's config, or of attnlab-train's with one choice of its group."""
        if any(key in self.keys(command) for command in sorted(HYDRA_COMMANDS)) or key in self.seen:
            return True
        for group, option in self.search_order(key):
            try:
                if key in self.keys("train", (f"{group}={option}",)):
                    return True
            except Exception:  # an option that does not compose alone (a partial preset)
                continue
        return False

    def option_problems(self, command: str, args: list[str]) -> list[str]:
        overrides = [(m, a) for a in args if (m := OVERRIDE.match(a)) and not ENV_WORD.match(a)]
        problems, choices = [], []
        for match, _ in overrides:
            key, value = match.group("key"), match.group("value")
            if key in self.groups:
                values = [v for v in re.split(r"[,|]", value) if v and not PLACEHOLDER.search(v)]
                for v in values:
                    if v != "null" and v not in self.groups[key] and f"{key}={v}" not in HYPOTHETICAL:
                        problems.append(f"{key}={v}: no option {v} in the group {key} (conf/{key}/)")
                valid = [v for v in values if v in self.groups[key]]
                if valid:
                    choices.append([f"{key}={v}" for v in valid])
        for combination in itertools.product(*choices):
            try:
                keys = self.keys(command, tuple(sorted(combination)))  # choices commute: one compose
            except Exception as error:  # said in the message
                problems.append(f"{' '.join(combination)}: does not compose ({error})")
                continue
            for match, word in overrides:
                key, prefix = match.group("key"), match.group("prefix")
                if key in self.groups or "/" in key:
                    continue
                if prefix in ("+", "++"):
                    parent = key.rpartition(".")[0]
                    if parent and parent not in keys:
                        problems.append(f"{word}: adds a key under {parent}, which is no key")
                    continue
                open_node = key.split(".")[0] in self.open_nodes and command != "train"
                if key not in keys and not (open_node and self.known_anywhere(key)):
                    problems.append(
                        f"{key}: not a key of attnlab-{command} with {' '.join(combination) or 'its defaults'}"
                    )
        return sorted(set(problems))


# --- links ----------------------------------------------------------------------------------------


def anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings."""
    slugs = set()
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        slugs.add(slug)
    return slugs


def link_problem(page: str, target: str) -> str | None:
    if target.startswith(("http://", "https://", "mailto:")):
        return None
    file, _, anchor = target.partition("#")
    path = (ROOT / page).parent / file if file else ROOT / page
    relative = str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)
    if relative in PENDING:
        return None
    if not path.exists():
        return f"({target}): no such file"
    if anchor and path.suffix == ".md" and anchor not in anchors(path.read_text(encoding="utf-8")):
        return f"({target}): no heading #{anchor} in {relative}"
    return None


# --- the checks -----------------------------------------------------------------------------------


def problems_of(mention: Mention, configs: Configs) -> list[str]:
    if mention.kind == "link":
        return [p] if (p := link_problem(mention.page, mention.text)) else []
    words = _words(mention.text)
    problems = [p for path in path_words(words) if (p := path_problem(path))]
    call = invocation(words)
    if call is not None:
        problems += command_problems(call)
        if call.command in HYDRA_COMMANDS and not mention.fails_on_purpose:
            args = [a for a in call.args if not a.startswith("-")]
            problems += configs.option_problems(call.command, args)
    elif mention.kind == "span" and words and all(OVERRIDE.match(w) for w in words):
        for word in words:
            key = OVERRIDE.match(word).group("key")
            if word in HYPOTHETICAL:
                continue
            if key in configs.groups:
                problems += configs.option_problems("train", [word])
            elif not configs.known_anywhere(key):
                problems.append(f"{key}: a key of no command's config, under any group choice")
    return problems


@pytest.fixture(scope="module")
def configs():
    register_schemas()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        yield Configs()


@pytest.mark.parametrize("page", PAGES)
def test_every_name_on_the_page_exists(page, configs):
    found = mentions(page, (ROOT / page).read_text(encoding="utf-8"))
    assert found, f"{page}: no names read: the extraction rules no longer match the page"
    problems = [f"{m}\n    -> {p}" for m in found for p in problems_of(m, configs)]
    assert not problems, f"{len(problems)} names on {page} do not exist:\n" + "\n".join(problems)


def test_the_extraction_reads_spans_commands_and_links():
    text = "\n".join(
        [
            "Run `attnlab-train model=vit` or `make",
            "test`; see [the page](docs/x.md#a) and `a\\|b`.",
            "",
            "```bash",
            "attnlab-eval split=val \\",
            "  data.seq_len=64   # a comment",
            "# a comment line",
            "```",
            "```python",
            "x = `not read`",
            "```",
            "```console",
            "$ attnlab-train model.n_haeds=8",
            "error: model.n_haeds=8: not a known key",
            "output line",
            "```",
        ]
    )
    found = [(m.line, m.kind, m.text, m.fails_on_purpose) for m in mentions("p.md", text)]
    assert found == [
        (1, "span", "attnlab-train model=vit", False),
        (1, "span", "make test", False),
        (2, "span", "a|b", False),
        (1, "link", "docs/x.md#a", False),
        (6, "command", "attnlab-eval split=val data.seq_len=64", False),
        (13, "command", "attnlab-train model.n_haeds=8", True),
    ]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("`attnlab-trian`", "not a console script"),
        ("`make tset`", "not a target of the Makefile"),
        ("`python -m attnlab.trian`", "no such module"),
        ("`attnlab-report runs --outt cmp`", "not an option of its parser"),
        ("`src/attnlab/cli/checkpoint.py`", "no such file"),
        ("`tests/test_readme.py::test_nothing_like_this`", "defines no"),
        ("`benchmarks/nowhere/<date>/x.json`", "no folder"),
        ("`attnlab-train model=gpt model.image_size=16`", "not a key of attnlab-train with model=gpt"),
        ("`attnlab-train model=vitt`", "no option vitt in the group model"),
        ("`attnlab-eval data.seq_lenn=64`", "not a key of attnlab-eval"),
        ("`model.attn_windw=4`", "a key of no command's config"),
        ("`trainer=ddp|gpuu`", "no option gpuu in the group trainer"),
        ("[a](docs/nowhere.md)", "no such file"),
        ("[a](docs/training.md#no-such-heading)", "no heading"),
    ],
)
def test_a_wrong_name_is_found(text, problem, configs):
    found = mentions("README.md", text)
    problems = [p for m in found for p in problems_of(m, configs)]
    assert any(problem in p for p in problems), (text, problems)


def test_real_names_pass(configs):
    text = (
        "`attnlab-train model=vit model.image_size=16` `model.pos.rope_base=500000` `optim.ns_steps=5` "
        "`attnlab-eval ckpt_path=x data.seq_len=64` `hydra.sweeper.n_trials=20` "
        "`tests/models/test_parallel.py::test_float8_*_200_steps` `benchmarks/gpu_runs/<date>-<gpu>/x.json` "
        "`attnlab-train '+callbacks.timer={_target_: x}'` [b](docs/training.md#sweeps)"
    )
    problems = [p for m in mentions("README.md", text) for p in problems_of(m, configs)]
    assert problems == []


def test_the_exceptions_are_still_needed():
    """An entry of ``HYPOTHETICAL`` that no page names, or a ``PENDING`` page that exists, is removed."""
    text = "\n".join((ROOT / page).read_text(encoding="utf-8") for page in PAGES)
    for name in HYPOTHETICAL:
        assert name in text, f"{name}: no page names it any more; remove it from HYPOTHETICAL"
    for path in PENDING:
        assert not (ROOT / path).exists(), f"{path} exists now: remove it from PENDING"
