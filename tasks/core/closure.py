"""A stage's code deps: the project files its process can run, read with `ast` from the files on disk.

The closure starts from the stage entry (`python -m tasks.core.run <stage>`, STAGE_ENTRY), the stage's module and
spec, follows every import (in function bodies too: lazy imports run) and the programs a file starts by module
name (rank workers), so an edit re-runs exactly the stages that can execute the edited file.

One rule narrows what an import would give: a HUB imports the spec module of every params section to validate or
dispatch over all of them — `specs/params.py` checks the whole params.yaml before any stage works (a bad key in
export's section must stop ingest, not hours later), `specs/ranks.py` parses any objective's rank job. What a hub
reads of another section's spec can refuse a params file, never change a stage's result (the stage reads only its
own sections' values, which DVC tracks as params). So from a hub only the spec modules of the sections the stage
reads are followed (`section_modules` maps a params section to the module defining its spec, read from the
`Params` class). Without it every stage depended on every spec, and editing the review gate's spec re-ran ingest.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Iterator

# Packages whose modules count as a stage's code; imports of anything else are libraries.
CODE_PACKAGES = ("tasks", "specs", "flows")
# What every stage's process runs first (dvc.yaml's cmd: `python -m tasks.core.run <stage>`).
STAGE_ENTRY = "tasks/core/run.py"
# Modules that import every section's spec to validate or dispatch (module docstring).
HUBS = ("specs/params.py", "specs/ranks.py")
PARAMS_MODULE = "specs/params.py"
# Data files a module reads from beside itself (`Path(__file__).parent / ...`): imports cannot show them, so
# they are declared here and follow the module into every closure that holds it.
PACKAGE_DATA: dict[str, tuple[str, ...]] = {
    "tasks/data/filtering/toxicity.py": ("tasks/data/filtering/wordlists",)}


def module_file(root: Path, dotted: str) -> str | None:
    """The project file (relative path) that importing `dotted` executes, if it is one of CODE_PACKAGES."""
    if dotted.split(".")[0] not in CODE_PACKAGES:
        return None
    base = Path(*dotted.split("."))
    for rel in (base.with_suffix(".py"), base / "__init__.py"):
        if (root / rel).is_file():
            return rel.as_posix()
    return None


def imported_modules(rel: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """Dotted names an import statement in file `rel` loads: each module with its parent packages, and for
    `from m import x` also `m.x` (x may be a submodule)."""
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    else:
        package = list(Path(rel).parent.parts)  # relative imports count from the file's package
        base = package[: len(package) - node.level + 1] if node.level else []
        module = ".".join([*base, *([node.module] if node.module else [])])
        targets = [module, *(f"{module}.{a.name}" for a in node.names)]
    for dotted in targets:
        parts = dotted.split(".")
        yield from (".".join(parts[:i]) for i in range(1, len(parts) + 1))


def stamp(root: Path, rel: str) -> tuple[int, int]:
    """What the parse caches are keyed on besides the path: an edited file gets parsed again."""
    st = (root / rel).stat()
    return st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=None)
def _parsed(root: Path, rel: str, when: tuple[int, int]) -> ast.Module:
    return ast.parse((root / rel).read_text(encoding="utf-8"))


def parse(root: Path, rel: str) -> ast.Module:
    return _parsed(root, rel, stamp(root, rel))


def is_program(root: Path, rel: str) -> bool:
    """Whether a module runs as a program (`python -m ...`): it has an `if __name__ == "__main__":` block."""
    return any(isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and isinstance(n.test.left, ast.Name)
               and n.test.left.id == "__name__" for n in parse(root, rel).body)


def program_named(root: Path, node: ast.AST) -> str | None:
    """The program a string names by its dotted module name (`[python, "-m", "tasks.train.worker", ...]`
    starts it in other processes), if the module exists and runs as a program."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value
            and node.value.replace(".", "_").isidentifier()):
        return None
    rel = module_file(root, node.value)
    return rel if rel and not rel.endswith("__init__.py") and is_program(root, rel) else None


@functools.lru_cache(maxsize=None)
def _file_edges(root: Path, rel: str, when: tuple[int, int]) -> frozenset[str]:
    edges: set[str] = set()
    for node in ast.walk(parse(root, rel)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            edges.update(f for d in imported_modules(rel, node) if (f := module_file(root, d)))
        elif program := program_named(root, node):
            edges.add(program)
    for package in Path(rel).parents:
        if package.parts and (root / package / "__init__.py").is_file():
            edges.add((package / "__init__.py").as_posix())
    return frozenset(edges)


def file_edges(root: Path, rel: str) -> frozenset[str]:
    """Project files that running file `rel` can load: what its imports name (in function bodies too: lazy
    imports run), the `__init__.py` of its packages (run on the way to it), and the programs it names (they
    run its work in other processes). Cached until the file changes."""
    return _file_edges(root, rel, stamp(root, rel))


def section_modules(root: Path) -> dict[str, str]:
    """params section -> the spec module defining it, read from `PARAMS_MODULE`'s `Params` class: each field's
    annotation (its alias when it has one, `validate_` is `validate`) resolved through the module's imports."""
    if not (root / PARAMS_MODULE).is_file():
        return {}
    tree = parse(root, PARAMS_MODULE)
    where: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if (f := module_file(root, node.module)) is not None:
                    where[alias.asname or alias.name] = f
    out: dict[str, str] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Params"):
        for field in (n for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)):
            name = field.target.id
            if isinstance(field.value, ast.Call):
                name = next((k.value.value for k in field.value.keywords
                             if k.arg == "alias" and isinstance(k.value, ast.Constant)), name)
            if isinstance(field.annotation, ast.Name) and field.annotation.id in where:
                out[name] = where[field.annotation.id]
    return out


def import_closure(root: Path, starts: list[str], sections: set[str] | None = None) -> set[str]:
    """Every project file (relative to `root`) that running the files `starts` can load, transitively. With
    `sections` (the params sections a stage reads), a hub's edges to other sections' spec modules are dropped."""
    by_section = section_modules(root) if sections is not None else {}
    others = {f for s, f in by_section.items() if s not in (sections or set())} - \
        {by_section[s] for s in (sections or set()) if s in by_section}
    seen: set[str] = set()
    todo = [s for s in starts if (root / s).is_file()]
    while todo:
        rel = todo.pop()
        if rel not in seen:
            seen.add(rel)
            edges = file_edges(root, rel)
            todo.extend(edges - others if rel in HUBS else edges)
    return seen


def data_files(root: Path, modules: set[str]) -> set[str]:
    """The PACKAGE_DATA files (folders listed file by file) of the modules in `modules`."""
    paths = [root / p for m in sorted(modules & set(PACKAGE_DATA)) for p in PACKAGE_DATA[m]]
    return {f.relative_to(root).as_posix() for p in paths
            for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if f.is_file()}
