"""The harness: what runs inside the sandbox (standard library and torch only).

One package under two names: ``harness`` in the sandbox, started as ``python -B -E -s -m
harness.run`` (a single-use sandbox) or ``-m harness.template`` (a fork server's template) in a
read-only folder that holds this package alone (``worker/sandbox/host.py``, ``harness_command``),
and ``worker.harness`` on the trusted side, which imports its leaf modules (``scenarios``,
``memory``, ``trace_schema``, ``linux``…). Its modules import one another relatively
(``from . import supervise``) and a check kind's module is imported relative to the package
(``runtime.kind_module``), so the same code runs under either name and no module adds a folder
to the import path. This file imports nothing: importing a leaf imports no supervisor or kind.
"""
