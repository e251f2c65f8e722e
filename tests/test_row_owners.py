"""One writer per row: the columns of a state machine are written by its owner only.

``service.row_owners.ROW_OWNERS`` is the one list of guarded columns, per table, with the
module that owns them. Anywhere else in ``service/``, each way of writing one is refused:

- an assignment, ``draft.revision += 1`` / ``execution.lease_expires_at = …``;
- ``setattr(row, "status", …)`` with the column's name;
- a constructor argument, ``Execution(status=…)``, ``Draft(revision=…)`` (or ``**values``,
  which could carry one);
- an SQL write, ``update(Execution).values(lease_expires_at=…)`` (also ``insert(...)``, a
  ``{"status": …}`` dict given to ``values``, and a table named by ``Model.__table__`` or a
  module-level alias of it).

``self.status`` (an object's own field, e.g. an HTTP status) and ``type(x).attr`` (a class
attribute, e.g. an action's ``contract_version``) are not rows.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from service.drafts import state
from service.drafts.models import Draft
from service.executions.models import Execution, OutboxMessage
from service.keys.models import KeyEnrolment
from service.principal import Principal, Role
from service.row_owners import ROW_OWNERS
from service.shop.models import Order
from service.sql import utcnow
from service.webhooks.models import WebhookDelivery

SERVICE = Path(__file__).parents[1] / "service"
BY_MODEL = {owned.model: owned for owned in ROW_OWNERS.values()}
ALL_COLUMNS = frozenset().union(*(owned.columns for owned in ROW_OWNERS.values()))


@dataclass(frozen=True)
class Write:
    path: str
    line: int
    what: str


def writes_outside_owners(root: Path) -> list[Write]:
    """Every write of a guarded column under ``root`` (a service/ tree) outside its owners."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        found += [write for write in writes_in(relative, path.read_text()) if write is not None]
    return found


def writes_in(path: str, source: str) -> Iterator[Write | None]:
    tree = ast.parse(source)
    aliases = _table_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in _flattened(targets):
                yield _attribute_write(path, target)
        elif isinstance(node, ast.Call):
            yield _setattr_write(path, node)
            yield _constructor_write(path, node)
            yield _sql_write(path, node, aliases)


def _flattened(targets: list[ast.expr]) -> Iterator[ast.expr]:
    for target in targets:
        if isinstance(target, ast.Tuple | ast.List):
            yield from _flattened(list(target.elts))
        else:
            yield target


def _owner_of(path: str, column: str, model: str | None = None) -> bool:
    tables = [BY_MODEL[model]] if model else [o for o in ROW_OWNERS.values() if column in o.columns]
    return any(path in owned.owners for owned in tables if column in owned.columns)


def _attribute_write(path: str, target: ast.expr) -> Write | None:
    if not isinstance(target, ast.Attribute) or target.attr not in ALL_COLUMNS:
        return None
    receiver = target.value
    if isinstance(receiver, ast.Name) and receiver.id in {"self", "cls"}:
        return None
    if isinstance(receiver, ast.Call):  # type(action).contract_version: a class attribute
        return None
    if _owner_of(path, target.attr):
        return None
    return Write(path, target.lineno, f"{ast.unparse(target)} = …")


def _setattr_write(path: str, call: ast.Call) -> Write | None:
    if not (isinstance(call.func, ast.Name) and call.func.id == "setattr" and len(call.args) > 1):
        return None
    name = call.args[1]
    if not isinstance(name, ast.Constant) or name.value not in ALL_COLUMNS:
        return None
    if _owner_of(path, str(name.value)):
        return None
    return Write(path, call.lineno, ast.unparse(call))


def _name_of(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _constructor_write(path: str, call: ast.Call) -> Write | None:
    owned = BY_MODEL.get(_name_of(call.func) or "")
    if owned is None or path in owned.owners:
        return None
    written = [k.arg or "**" for k in call.keywords if k.arg is None or k.arg in owned.columns]
    if not written:
        return None
    return Write(path, call.lineno, f"{owned.model}({', '.join(written)}=…)")


def _sql_write(path: str, call: ast.Call, aliases: dict[str, str]) -> Write | None:
    """``update(T).….values(col=…)`` / ``insert(T).values({...})`` of a guarded table."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "values"):
        return None
    model = _statement_table(call.func.value, aliases)
    if model is None:
        return None
    owned = BY_MODEL[model]
    if path in owned.owners:
        return None
    written = [k.arg or "**" for k in call.keywords if k.arg is None or k.arg in owned.columns]
    for argument in call.args:
        if isinstance(argument, ast.Dict):
            written += [
                str(key.value)
                for key in argument.keys
                if isinstance(key, ast.Constant) and key.value in owned.columns
            ]
        else:
            written.append("<values>")  # rows built elsewhere: only the owner may say so
    if not written:
        return None
    return Write(path, call.lineno, f"update/insert({model}).values({', '.join(written)})")


def _statement_table(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """The guarded model an ``update(...)``/``insert(...)`` chain writes, if any."""
    while isinstance(node, ast.Call | ast.Attribute):
        if isinstance(node, ast.Call) and _name_of(node.func) in {"update", "insert"}:
            return _model_named(node.args[0], aliases) if node.args else None
        node = node.func if isinstance(node, ast.Call) else node.value
    return None


def _model_named(node: ast.expr, aliases: dict[str, str]) -> str | None:
    if isinstance(node, ast.Attribute) and node.attr == "__table__":
        node = node.value
    name = _name_of(node)
    if name in aliases:
        return aliases[name]
    return name if name in BY_MODEL else None


def _table_aliases(tree: ast.Module) -> dict[str, str]:
    """Module-level ``_DRAFTS: Table = Draft.__table__`` and the like."""
    aliases = {}
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and value is not None:
            model = _model_named(value, {})
            if model is not None:
                aliases[target.id] = model
    return aliases


def test_nothing_but_its_owner_writes_a_guarded_column():
    outside = writes_outside_owners(SERVICE)
    assert outside == [], "\n".join(f"{w.path}:{w.line}: {w.what}" for w in outside)


def test_every_owner_exists_and_every_column_is_a_column():
    """The list itself cannot drift: each owner module exists, each column is the model's."""
    models = [Draft, Execution, WebhookDelivery, OutboxMessage, KeyEnrolment, Order]
    for model in models:
        owned = BY_MODEL[model.__name__]
        assert model.__tablename__ in ROW_OWNERS  # type: ignore[attr-defined]
        assert owned.columns <= set(model.model_fields), model.__name__
        for owner in owned.owners:
            assert (SERVICE / owner).is_file(), owner


WRITES_THE_GUARD_MUST_SEE = """
from sqlalchemy import insert, update
from service.drafts.models import Draft
from service.executions.models import Execution

_EXECUTIONS = Execution.__table__

def f(session, draft, execution, delivery, now):
    draft.revision += 1
    draft.status, draft.open_dedupe_key = "approved", None
    execution.lease_expires_at: object = now
    setattr(delivery, "republish_at", now)
    Execution(id="exe_1", status="queued", republish_at=now)
    Draft(**fields)
    session.execute(update(Execution).where(x).values(lease_expires_at=now))
    session.execute(update(_EXECUTIONS).values({"publishes": 2}))
    session.execute(insert(Draft.__table__).values(rows))
"""


def test_the_guard_sees_every_kind_of_write():
    found = [w for w in writes_in("elsewhere.py", WRITES_THE_GUARD_MUST_SEE) if w is not None]
    assert [w.what for w in found] == [
        "draft.revision = …",
        "draft.status = …",
        "draft.open_dedupe_key = …",
        "execution.lease_expires_at = …",
        "setattr(delivery, 'republish_at', now)",
        "Execution(status, republish_at=…)",
        "Draft(**=…)",
        "update/insert(Execution).values(lease_expires_at)",
        "update/insert(Execution).values(publishes)",
        "update/insert(Draft).values(<values>)",
    ]


def test_the_guard_lets_the_owner_and_non_rows_through():
    source = """
def f(self, action, draft, report):
    self.status = 404
    type(action).contract_version = report.version
    draft.revision += 1
"""
    found = [w for w in writes_in("drafts/state.py", source) if w is not None]
    assert found == []


def test_an_owner_refuses_its_own_columns_handed_in_by_a_caller():
    agent = Principal(tenant="demo", subject="a", role=Role.AGENT, token_id="t", on_behalf_of="u")
    fields = {"params_sha256": "a" * 64, "revision": 7}
    with pytest.raises(ValueError, match="revision"):
        state.proposed(
            "dft_1",
            proposer=agent,
            action="refund",
            contract_version=1,
            fields=fields,
            now=utcnow(),
            trace_id=None,
            idempotency_key=None,
        )
