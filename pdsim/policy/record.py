"""`Record`: the base of the planners' generic plans (immutable, compared and printed by field).

A plan is built at every scheduling step, so it must be cheap to build. A dataclass cannot be
both generic and compiled (mypyc rejects the pair at import), and a Python class's
dataclass-generated `__init__` runs in the interpreter (~7x the cost of a compiled one). So the
plans are compiled classes with a written `__init__` and `Final` attributes, which compiled
code refuses to reassign just as a frozen dataclass does. This base gives them a dataclass's
`==`, `hash` and `repr` over the fields named in `FIELDS`.
"""

from __future__ import annotations

from typing import ClassVar


class Record:
    FIELDS: ClassVar[tuple[str, ...]] = ()

    def values(self) -> tuple[object, ...]:
        """The fields' values, in FIELDS order."""
        return tuple(getattr(self, name) for name in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self) or not isinstance(other, Record):
            return NotImplemented
        return self.values() == other.values()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(self.FIELDS, self.values(), strict=True))
        return f"{type(self).__name__}({fields})"
