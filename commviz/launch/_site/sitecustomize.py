"""Auto-instrumentation for ``commviz run``: every Python process of the job loads this first.

``commviz run`` puts this file's directory first on the job's PYTHONPATH, so each Python the
job starts (torchrun's agent and workers, multiprocessing spawn children, plain
subprocesses) runs it at start-up. It imports neither torch nor commviz: it only adds an
import hook, which costs nothing until ``torch.distributed.distributed_c10d`` is imported.
Then ``init_process_group`` is wrapped so that, once the process group exists,
``commviz.instrument()`` reports to ``$COMMVIZ_ADDR``. Processes forked later inherit the
wrapped function (and a running instrumentation, whose emitter restarts in the child).

Whatever goes wrong here, the job runs unchanged: a process that cannot import commviz says
so in one line on stderr and goes on uninstrumented. The ``sitecustomize`` that this one
hides (the next on ``sys.path``) still runs afterwards.
"""

import os
import sys

_TARGET = "torch.distributed.distributed_c10d"
_HERE = os.path.dirname(os.path.abspath(__file__))


class _C10dLoader:
    """The real loader of distributed_c10d, plus a patch right after the module has run.

    The patch lands before ``torch.distributed`` re-exports the function (``from
    .distributed_c10d import *``), so every alias of ``init_process_group`` is the wrapper.
    """

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            module.init_process_group = _wrap(module.init_process_group)
        except Exception as exc:  # a torch we do not understand: run unchanged
            _say(f"cannot hook init_process_group ({type(exc).__name__}: {exc})")

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _Finder:
    """A meta path entry that waits for distributed_c10d, hands it to the next finders and
    wraps the loader they return; then it removes itself."""

    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        meta = sys.meta_path
        rest = meta[meta.index(self) + 1:] if self in meta else []
        if self in meta:
            meta.remove(self)
        for finder in rest:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _C10dLoader(spec.loader)
                return spec
        return None


def _wrap(init):
    import functools

    @functools.wraps(init)
    def init_process_group(*args, **kwargs):
        result = init(*args, **kwargs)
        _instrument()
        return result

    return init_process_group


def _instrument():
    try:
        import commviz

        commviz.instrument()
    except Exception as exc:
        _say(f"this process is not instrumented ({type(exc).__name__}: {exc})")


def _say(message):
    try:
        sys.stderr.write(f"commviz: {message}\n")
    except Exception:
        pass


def _chain():
    """Run the sitecustomize this one hides, as Python would have without commviz."""
    from importlib.machinery import PathFinder

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    from importlib.util import module_from_spec  # a few ms: only when there is one to run

    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if _TARGET not in sys.modules:
    sys.meta_path.insert(0, _Finder())
_chain()
