"""One small registry factory shared by envs, models, agents and trainers (after
fairseq/registry.py).

A registry maps a name to a class. Registering validates the name and, where the kind has one,
the base class. Registering the same name again is fine when it is the same class seen again
(a module imported twice: Ray workers and ``--user_dir`` both re-import); a different class under
a taken name is an error.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from dataclasses import dataclass
from typing import Callable, Dict, Optional

from core.errors import ConfigError  # (also importable from here, as plugins long did)



#: how a plugin registered by the code that runs shows its source (its module follows)
USER_CODE = "registered by "

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")

# Where plugins come from, shown by --list and in errors: "built-in", the --user_dir path
# while one is imported, else None: the code that runs registered it (a script using ddrl.train,
# a package of the user's it imported), named by its module.
_current_source = None


@dataclass
class Entry:
    name: str
    cls: type
    source: str

    @property
    def summary(self) -> str:
        doc = inspect.getdoc(unwrap_actor_class(self.cls)) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""


def _identity(cls) -> tuple:
    """What makes two class objects "the same class" across re-imports."""
    return (cls.__module__, cls.__qualname__)


def _source_file(cls):
    try:
        path = inspect.getsourcefile(cls)
    except (TypeError, OSError):
        return None
    return os.path.realpath(path) if path else None


def _same_class(a, b) -> bool:
    """The same class, re-imported: the same module and name, or the same name in the same
    file imported under another module name (a --user_dir plugin that its own code, or a
    notebook after ddrl.load, imports again as a module of its own)."""
    if _identity(a) == _identity(b):
        return True
    source = _source_file(a)
    return a.__qualname__ == b.__qualname__ and source is not None and source == _source_file(b)


class Registry:
    def __init__(self, kind: str, base_class: Optional[type] = None,
                 check: Optional[Callable[[type], None]] = None, home: Optional[str] = None,
                 flag: Optional[str] = None):
        """``home``: the package whose classes are this kind's built-ins (listed as such);
        classes from anywhere else are the --user_dir's. ``flag``: the command-line flag that
        names one (default --<kind>_name)."""
        self.kind = kind
        self.flag = flag or f"--{kind}_name"
        self.base_class = base_class
        self.check = check
        self.home = home
        self.entries: Dict[str, Entry] = {}

    def register(self, name: str):
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ConfigError(f"cannot register {self.kind} {name!r}: a name is letters, digits, "
                              f"'_' and '-', starting with a letter or '_'.")

        def decorator(cls):
            target = unwrap_actor_class(cls)
            if self.base_class is not None and not (
                    inspect.isclass(target) and issubclass(target, self.base_class)):
                raise ConfigError(
                    f"cannot register {self.kind} {name!r}: {cls!r} must subclass "
                    f"{self.base_class.__module__}.{self.base_class.__qualname__}.")
            declared = target.__dict__.get("Config")
            if dataclasses.is_dataclass(declared) and "add_args" not in target.__dict__:
                target.add_args = staticmethod(_generated_add_args(target, declared))
            if self.check is not None:
                self.check(target)
            old = self.entries.get(name)
            if old is not None and not _same_class(unwrap_actor_class(old.cls), target):
                raise ConfigError(
                    f"cannot register {self.kind} {name!r} for {_identity(target)}: the name is "
                    f"already taken by {_identity(unwrap_actor_class(old.cls))} "
                    f"({old.source}). Pick another name.")
            # A built-in imported while a --user_dir module runs is still built-in.
            builtin = target.__module__.split(".")[0] in (self.home, "core")
            source = "built-in" if builtin else _current_source
            if source is None:
                source = f"{USER_CODE}{target.__module__}"
            if old is not None and not builtin:  # re-imported: still from where it came
                source = old.source or source
            self.entries[name] = Entry(name, cls, source)
            return cls

        return decorator

    def names(self):
        return sorted(self.entries)

    def get(self, name: str):
        """The registered class (as registered: an env may be a Ray ActorClass)."""
        if name not in self.entries:
            raise ConfigError(unknown_name_message(self.kind, name, self.names(), self.flag))
        return self.entries[name].cls

    def __contains__(self, name):
        return name in self.entries


#: The registries of the plugin kinds, by kind ("env", "model", "agent"): each plugin package
#: publishes its own when it is imported (``publish``), and the library finds them here by kind
#: (core/plugins.py load_plugins), never by importing the packages above it.
_PUBLISHED: Dict[str, Registry] = {}


def publish(registry: Registry) -> Registry:
    """Make ``registry`` the one ``registry_of(registry.kind)`` finds; returns it."""
    _PUBLISHED[registry.kind] = registry
    return registry


def published() -> list:
    """Every published registry, in the order published."""
    return list(_PUBLISHED.values())


def registry_of(kind: str) -> Registry:
    """The published registry of ``kind``; an error naming what is published when there is none
    (its plugin package was not imported in this process)."""
    if kind not in _PUBLISHED:
        raise LookupError(f"no {kind} registry is published in this process (published: "
                          f"{', '.join(sorted(_PUBLISHED)) or 'none'}): import the package "
                          f"that defines the {kind} plugins first")
    return _PUBLISHED[kind]


def _generated_add_args(cls, config_cls):
    """add_args for a class that declares ``Config`` (core/config.py add_args_from): the flags
    it inherits first, then the fields'."""
    from core.config import add_args_from
    inherited = getattr(super(cls, cls), "add_args", None)
    own = add_args_from(config_cls)

    def add_args(parser):
        if inherited is not None:
            inherited(parser)
        own(parser)
    return add_args


def unknown_name_message(kind: str, name: str, known, flag: Optional[str] = None) -> str:
    """One paragraph: ``name`` is no registered ``kind`` (``flag``, default --<kind>_name), the
    registered ones, the closest as "did you mean"."""
    close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.5)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(known) if known else "(none)"
    flag = flag or f"--{kind}_name"
    return (f"unknown {kind} {name!r} ({flag}). Registered {kind}s: {listed}.{hint} "
            f"A plugin outside the repository is loaded with --user_dir DIR.")


def unwrap_actor_class(cls):
    """The plain Python class behind a ``@ray.remote`` class, so it can also run in-process."""
    meta = getattr(cls, "__ray_metadata__", None)
    if meta is not None:
        return meta.modified_class
    return cls


def import_package_modules(package_name: str, package_dir: str):
    """Import every module of a plugin folder so that its decorators run (fairseq-style scan)."""
    for file in sorted(os.listdir(package_dir)):
        if file.startswith(("_", ".")):
            continue
        if file.endswith(".py"):
            importlib.import_module(f"{package_name}.{file[:-3]}")


def _pickle_by_value(module):
    """Ray ships classes to its workers with cloudpickle, by reference to their module when it
    can. A --user_dir module's name means nothing in another process, so its classes (an env
    actor class above all) travel by value instead."""
    try:
        from ray import cloudpickle
    except ImportError:  # pragma: no cover - ray is a core requirement
        return
    cloudpickle.register_pickle_by_value(module)


def registered_by_user_code(kind: str, name: str) -> bool:
    """Whether the ``kind`` plugin ``name`` was registered by the user's own code as it ran
    (a script or notebook using ddrl.train, a package of theirs it imported): neither a
    built-in nor a --user_dir's, so another process (a Ray worker) has not registered it."""
    entry = registry_of(kind).entries.get(name)
    return entry is not None and entry.source.startswith(USER_CODE)


def ship_by_value(cls):
    """Let ``cls`` travel to Ray workers whole: its top-level package (a package of the
    user's, which a worker may not be able to import, on a cluster's node least of all) is
    pickled by value. A class of ``__main__`` travels by value anyway."""
    top = cls.__module__.split(".")[0]
    if top != "__main__" and top in sys.modules:
        _pickle_by_value(sys.modules[top])


def shadow_hint(exc):
    """For an import of the user's own package named as one of ddrl's top-level ones (their
    models.net, say): why it fails, and what to do."""
    top = (getattr(exc, "name", None) or "").split(".")[0]
    module = sys.modules.get(top) if isinstance(exc, ImportError) and top else None
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not str(getattr(module, "__file__", None) or "").startswith(root + os.sep):
        return ""
    return (f". '{top}' is ddrl's own top-level package here (ddrl keeps the seed's layout: "
            f"core, envs, models, agents, options, loggers), so a package of yours named so "
            f"cannot be imported beside ddrl: rename yours (e.g. my_{top})")


def import_user_dir(user_dir: str):
    """Import plugins from a folder anywhere: its .py files and its envs/, models/, agents/,
    trainers/, loggers/ subfolders. Idempotent: a module already imported from the same file is not run again."""
    global _current_source
    path = os.path.abspath(os.path.expanduser(user_dir))
    if not os.path.isdir(path):
        raise ConfigError(f"--user_dir {user_dir!r} is not a folder (resolved to {path}). "
                          f"Give a folder holding plugin .py files or envs/, models/, agents/.")
    files = [os.path.join(path, f) for f in sorted(os.listdir(path))]
    for sub in ("envs", "models", "agents", "trainers", "loggers"):
        subdir = os.path.join(path, sub)
        if os.path.isdir(subdir):
            files += [os.path.join(subdir, f) for f in sorted(os.listdir(subdir))]
    # Make `import helper` between the user's own files work, as it would in a script.
    if path not in sys.path:
        sys.path.append(path)
    tag = re.sub(r"\W", "_", os.path.basename(path)) or "root"
    previous, _current_source = _current_source, path
    try:
        for file in files:
            name = os.path.basename(file)
            if not name.endswith(".py") or name.startswith(("_", ".")):
                continue
            rel = os.path.relpath(file, path)[:-3].replace(os.sep, ".")
            module_name = f"ddrl_user_{tag}.{rel}"
            if module_name in sys.modules:
                continue
            spec = importlib.util.spec_from_file_location(module_name, file)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
                _pickle_by_value(module)
            except ConfigError:
                raise
            except Exception as exc:
                del sys.modules[module_name]
                raise ConfigError(f"--user_dir: importing {file} failed: "
                                  f"{type(exc).__name__}: {exc}{shadow_hint(exc)}") from exc
    finally:
        _current_source = previous
