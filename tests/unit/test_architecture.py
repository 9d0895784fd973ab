"""The package's layering, read from its source (AST), so a wrong import fails here:

* `domain/` is pure: it imports only the standard library, pydantic, yaml, other domain
  modules and the table definitions;
* boto3, botocore, httpx and githubkit are imported only under `adapters/`, `local/` and
  `runner/` (the composition root and the handlers reach them through adapters);
* no import cycle among Steward's modules (imports inside functions count: a lazy import
  still ties two modules together; `if TYPE_CHECKING:` blocks do not, they never run);
* the runtime (`runner/` and every Steward module it reaches) imports no AWS SDK: it holds
  no AWS credential and writes only through the control plane's runtime routes.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "layers" / "steward" / "python"
PACKAGE = PACKAGE_ROOT / "steward"

DOMAIN_MAY_IMPORT = {"pydantic", "pydantic_core", "yaml", "steward.domain", "steward.tables"}
OUTSIDE_CALLS = ("boto3", "botocore", "httpx", "githubkit", "githubkit_schemas", "mypy_boto3")
OUTSIDE_CALLS_ALLOWED_IN = ("steward.adapters", "steward.local", "steward.runner")
AWS_SDK = ("boto3", "botocore", "mypy_boto3", "s3transfer", "aiobotocore")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module, absolute
    line: int
    runs: bool  # False inside `if TYPE_CHECKING:`


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path) -> Iterator[Import]:
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            guarded |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        runs = id(node) not in guarded
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno, runs)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            yield Import(module, target, node.lineno, runs)
            # `from steward import wiring` imports the module steward.wiring
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                if (PACKAGE_ROOT / Path(*candidate.split("."))).with_suffix(".py").exists() or (
                    PACKAGE_ROOT / Path(*candidate.split(".")) / "__init__.py"
                ).exists():
                    yield Import(module, candidate, node.lineno, runs)


def all_imports(root: Path = PACKAGE) -> list[Import]:
    return [i for path in sorted(root.rglob("*.py")) for i in imports_of(path)]


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def domain_violations(imports: list[Import]) -> list[str]:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    out = []
    for i in imports:
        if not within(i.module, "steward.domain"):
            continue
        top = i.target.split(".")[0]
        if top in stdlib or any(within(i.target, allowed) for allowed in DOMAIN_MAY_IMPORT):
            continue
        if i.target == "steward":  # `from steward.domain import x` resolves through the package
            continue
        out.append(f"{i.module}:{i.line} imports {i.target}")
    return out


def outside_call_violations(imports: list[Import]) -> list[str]:
    return [
        f"{i.module}:{i.line} imports {i.target}"
        for i in imports
        if i.target.split(".")[0] in OUTSIDE_CALLS
        and not any(within(i.module, allowed) for allowed in OUTSIDE_CALLS_ALLOWED_IN)
    ]


def runtime_aws_imports(imports: list[Import]) -> list[str]:
    """AWS SDK imports anywhere the runtime's modules reach (lazy imports count; `if
    TYPE_CHECKING:` blocks do not), each with the chain of imports that reaches it."""
    graph: dict[str, list[Import]] = {}
    for i in imports:
        if i.runs:
            graph.setdefault(i.module, []).append(i)
    reached = {m: [m] for m in graph if within(m, "steward.runner")}
    queue = list(reached)
    out = []
    while queue:
        module = queue.pop()
        for i in graph.get(module, ()):
            if i.target.split(".")[0] in AWS_SDK:
                out.append(" -> ".join(reached[module]) + f":{i.line} imports {i.target}")
            elif within(i.target, "steward") and i.target not in reached:
                reached[i.target] = [*reached[module], i.target]
                queue.append(i.target)
    return sorted(out)


def cycles(imports: list[Import]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        if i.runs and within(i.target, "steward") and i.target != i.module:
            graph.setdefault(i.module, set()).add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            # A package's __init__ importing its own submodules is not a cycle of layers.
            if len(component) > 1 and not _package_and_children(component):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _package_and_children(component: list[str]) -> bool:
    shortest = min(component, key=len)
    return all(within(m, shortest) for m in component)


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    found = all_imports()
    assert len({i.module for i in found}) > 50  # the walk found the package
    return found


def test_domain_imports_nothing_but_domain_tables_and_plain_libraries(imports: list[Import]) -> None:
    assert domain_violations(imports) == []


def test_outside_calls_are_made_only_by_adapters_local_and_runner(imports: list[Import]) -> None:
    assert outside_call_violations(imports) == []


def test_no_import_cycles(imports: list[Import]) -> None:
    assert cycles(imports) == []


def test_the_runtime_imports_no_aws_sdk(imports: list[Import]) -> None:
    assert runtime_aws_imports(imports) == []


# The rules themselves, on small made-up trees, so a rule that can never fire is caught.
BAD_TREES = [
    (
        "domain imports an adapter",
        {"domain/x.py": "from steward.adapters import dynamo\n"},
        domain_violations,
    ),
    ("domain imports boto3", {"domain/x.py": "import boto3\n"}, domain_violations),
    (
        "domain imports a service lazily",
        {"domain/x.py": "def f():\n    import steward.services.relay\n"},
        domain_violations,
    ),
    ("a service imports boto3", {"services/x.py": "import boto3\n"}, outside_call_violations),
    (
        "the runtime reaches boto3 through a service",
        {
            "runner/run.py": "def f():\n    from steward.services import publication\n",
            "services/publication.py": "from steward.adapters.task_store import TaskStore\n",
            "adapters/task_store.py": "from botocore.exceptions import ClientError\n",
        },
        runtime_aws_imports,
    ),
    ("a handler imports httpx", {"h.py": "from httpx import Client\n"}, outside_call_violations),
    (
        "githubkit's schemas outside adapters",
        {"services/w.py": "from githubkit_schemas.latest import x\n"},
        outside_call_violations,
    ),
]


@pytest.mark.parametrize(("case", "files", "rule"), BAD_TREES, ids=[c[0] for c in BAD_TREES])
def test_each_rule_fires_on_a_tree_that_breaks_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, files: dict[str, str], rule: object
) -> None:
    root = tmp_path / "steward"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE_ROOT", tmp_path)
    assert rule(all_imports(root)), case  # type: ignore[operator]


def test_a_cycle_through_a_lazy_import_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "steward"
    (root / "local").mkdir(parents=True)
    (root / "cli.py").write_text("def f():\n    from steward.local.demo import run\n")
    (root / "local" / "demo.py").write_text("from steward.cli import table\n")
    (root / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from steward.cli import x\n"
    )
    (root / "back.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE_ROOT", tmp_path)
    assert cycles(all_imports(root)) == [["steward.cli", "steward.local.demo"]]
