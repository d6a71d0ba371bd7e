"""Where a tool's body runs under a :class:`~executors.ray.RayExecutor`:
:class:`RayTask` (a Ray task per call), :class:`RayActor` (a method of a
Ray actor that keeps state), or locally (``None``).

A tool opts in through its host-only metadata, ``meta={"ray": ...}``:

* ``True`` or ``{}``: a Ray task with the executor's defaults;
* ``{"num_cpus": 2, "num_gpus": 0, "resources": {...}, "max_retries": 0,
  "memory": ...}``: a Ray task with these options;
* ``{"actor": "counter", "method": "add"}``: a method of the actor the
  executor knows as ``"counter"`` (``RayExecutor(actors={...})``);
  ``method`` defaults to the tool's name;
* ``False``: always local.

The executor's ``remote=`` overrides the metadata (see
:func:`placement`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from dsh_actors import InvalidTypeError, InvalidValueError

__all__ = ["ActorMethod", "RayActor", "RayTask", "placement"]

_TASK_KEYS = ("num_cpus", "num_gpus", "resources", "max_retries", "memory")
_ACTOR_KEYS = ("actor", "method")


def check_amount(value: Any, what: str) -> None:
    """``value`` is a finite number >= 0 (a bool is not one)."""
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise InvalidValueError(f"{what} must be a finite number >= 0, got {value!r}")


def check_retries(value: Any, what: str) -> None:
    """``value`` is Ray's ``max_retries``: an int >= -1 (-1: retry forever)."""
    if type(value) is not int or value < -1:
        raise InvalidValueError(f"{what} must be an int >= -1, got {value!r}")


@dataclass(frozen=True, slots=True)
class RayTask:
    """Run each call as a Ray task. ``None`` fields take the executor's
    defaults (``num_cpus``; ``max_retries`` 0: a crashed call is not run
    again, since a body may not be idempotent). ``options`` go to
    ``.options(...)`` as they are (``runtime_env``, ``scheduling_strategy``,
    ...)."""

    num_cpus: float | None = None
    num_gpus: float | None = None
    resources: Mapping[str, float] | None = None
    memory: int | None = None
    max_retries: int | None = None
    options: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        # Checked here, not by Ray when the first call is submitted (a bad
        # value then failed the whole batch, with Ray's message).
        for name in ("num_cpus", "num_gpus"):
            value = getattr(self, name)
            if value is not None:
                check_amount(value, f"RayTask {name}")
        if self.memory is not None and (type(self.memory) is not int or self.memory < 0):
            raise InvalidValueError(f"RayTask memory must be an int of bytes >= 0, got {self.memory!r}")
        if self.max_retries is not None:
            check_retries(self.max_retries, "RayTask max_retries")
        if self.resources is not None:
            if not isinstance(self.resources, Mapping):
                raise InvalidTypeError(
                    f"RayTask resources must map resource names to amounts, got {type(self.resources).__qualname__}"
                )
            for key, value in self.resources.items():
                if type(key) is not str or not key:
                    raise InvalidValueError(f"RayTask resources: a resource name must be a non-empty str, got {key!r}")
                check_amount(value, f"RayTask resources[{key!r}]")
        if self.options is not None and not isinstance(self.options, Mapping):
            raise InvalidTypeError(f"RayTask options must be a mapping, got {type(self.options).__qualname__}")

    def ray_options(self, default_cpus: float, default_retries: int) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.options or {})
        out["num_cpus"] = default_cpus if self.num_cpus is None else self.num_cpus
        out["max_retries"] = default_retries if self.max_retries is None else self.max_retries
        if self.num_gpus is not None:
            out["num_gpus"] = self.num_gpus
        if self.resources is not None:
            out["resources"] = dict(self.resources)
        if self.memory is not None:
            out["memory"] = self.memory
        return out

    def key(self) -> tuple[Any, ...]:
        return (
            self.num_cpus,
            self.num_gpus,
            None if self.resources is None else tuple(sorted(self.resources.items())),
            self.memory,
            self.max_retries,
            None if self.options is None else repr(sorted(self.options.items())),
        )


class RayActor:
    """A Ray actor holding one instance of ``cls(*args, **kwargs)``, made
    on first use. A tool placed on it runs ``instance.<method>(args, ctx)``
    there: calls to one actor run one at a time (``max_concurrency=1``, the
    default), so its state needs no lock.

    ``name`` (with ``namespace``) makes it a named actor, shared by every
    executor and driver that names it (``get_if_exists``): several runtimes
    against one cluster then share one instance. ``num_cpus`` (default 0)
    is what the actor holds for its lifetime; ``options`` go to Ray's
    ``.options(...)`` (``lifetime="detached"``, ``max_restarts``, ...).
    ``cls`` and the arguments must be picklable (cloudpickle).

    ``actor.method("add")`` places a tool on the method ``add``; the actor
    itself places a tool on the method named like the tool.
    """

    def __init__(
        self,
        cls: type,
        *args: Any,
        name: str | None = None,
        namespace: str | None = None,
        num_cpus: float = 0,
        max_concurrency: int = 1,
        options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(cls, type):
            raise InvalidTypeError(f"RayActor takes a class, got {type(cls).__qualname__}")
        if name is not None and (type(name) is not str or not name):
            raise InvalidValueError("RayActor name must be a non-empty str or None")
        if namespace is not None and (type(namespace) is not str or not namespace):
            raise InvalidValueError("RayActor namespace must be a non-empty str or None")
        check_amount(num_cpus, "RayActor num_cpus")
        if type(max_concurrency) is not int or max_concurrency < 1:
            raise InvalidValueError(f"max_concurrency must be a positive int, got {max_concurrency!r}")
        if options is not None and not isinstance(options, Mapping):
            raise InvalidTypeError(f"RayActor options must be a mapping, got {type(options).__qualname__}")
        self.cls = cls
        self.args = args
        self.kwargs = kwargs
        self.name = name
        self.namespace = namespace
        self.num_cpus = num_cpus
        self.max_concurrency = max_concurrency
        self.options = dict(options or {})
        self._lock = threading.Lock()
        self._handle: Any = None

    def method(self, name: str) -> ActorMethod:
        if type(name) is not str or not name:
            raise InvalidValueError("a method name must be a non-empty str")
        return ActorMethod(self, name)

    def __repr__(self) -> str:
        label = f" name={self.name!r}" if self.name else ""
        return f"<RayActor {self.cls.__qualname__}{label}>"


@dataclass(frozen=True, slots=True)
class ActorMethod:
    """A tool placed on ``actor``'s method ``name`` (``None``: the tool's)."""

    actor: RayActor
    name: str | None = field(default=None)


Placement = RayTask | ActorMethod | None


def _from_meta(value: Any, actors: Mapping[str, RayActor], tool: str) -> Placement:
    if value is None or value is False:
        return None
    if value is True:
        return RayTask()
    if isinstance(value, (RayTask, ActorMethod)):
        return value
    if isinstance(value, RayActor):
        return ActorMethod(value)
    if isinstance(value, Mapping):
        if "actor" in value:
            unknown = sorted(str(k) for k in value if k not in _ACTOR_KEYS)
            if unknown:
                raise InvalidValueError(
                    f'tool "{tool}": meta["ray"] for an actor takes "actor" and "method" only, not {unknown} '
                    "(resources are the RayActor's: RayActor(..., num_cpus=..., options={...}))"
                )
            name = value["actor"]
            actor = actors.get(name) if type(name) is str else None
            if actor is None:
                raise InvalidValueError(
                    f'tool "{tool}": meta["ray"]["actor"] is {name!r}, which is not one of the '
                    f"executor's actors ({sorted(actors)})"
                )
            method = value.get("method")
            if method is not None and (type(method) is not str or not method):
                raise InvalidValueError(f'tool "{tool}": meta["ray"]["method"] must be a non-empty str, got {method!r}')
            return ActorMethod(actor, method)
        unknown = sorted(str(k) for k in value if k not in _TASK_KEYS)
        if unknown:
            raise InvalidValueError(f'tool "{tool}": unknown meta["ray"] option(s) {unknown}')
        resources = value.get("resources")
        try:
            return RayTask(
                num_cpus=value.get("num_cpus"),
                num_gpus=value.get("num_gpus"),
                resources=dict(resources) if isinstance(resources, Mapping) else resources,
                memory=value.get("memory"),
                max_retries=value.get("max_retries"),
            )
        except (InvalidValueError, InvalidTypeError) as exc:
            raise InvalidValueError(f'tool "{tool}": meta["ray"]: {exc}') from None
    raise InvalidValueError(f'tool "{tool}": meta["ray"] must be a bool, a mapping, a RayTask or a RayActor')


Remote = Callable[[Any], Any] | Collection[str] | Mapping[str, Any] | None


def placement(definition: Any, remote: Remote, actors: Mapping[str, RayActor]) -> Placement:
    """Where ``definition``'s body runs.

    ``remote`` (the executor's) decides when given: a predicate
    ``fn(definition)`` answering a bool, a :class:`RayTask`, a
    :class:`RayActor` / :class:`ActorMethod` or ``None`` (local); a mapping
    of tool names to those (or to a ``meta["ray"]``-style value); a
    collection of tool names (Ray tasks with the defaults). Without it, the
    tool's ``meta["ray"]`` does. Raises ``ValueError`` for a malformed
    answer (the call then fails; see ``RayExecutor.tool_body``).
    """
    name = definition.name
    if remote is None:
        meta = definition.meta
        value = None if meta is None else meta.get("ray")
        return _from_meta(value, actors, name)
    if isinstance(remote, Mapping):
        return _from_meta(remote.get(name), actors, name)
    if callable(remote):
        return _from_meta(remote(definition), actors, name)
    return RayTask() if name in remote else None
