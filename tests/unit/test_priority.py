"""Worker priorities with an injected setpriority: the value by kind, and
a refusal (no CAP_SYS_NICE) leaves the process as it is and says so."""
from __future__ import annotations

import errno
import logging

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.state import WorkerKind
from kuryr_supervisor.workers import priority


@pytest.fixture
def conf() -> cfg.ConfigOpts:
    c = cfg.ConfigOpts()
    conf_mod.register_opts(c)
    c([], default_config_files=[])
    c.set_override("work_nice", 4, "supervisor")
    return c


def test_each_kind_gets_its_value(conf: cfg.ConfigOpts) -> None:
    for kind, wanted in [(WorkerKind.HEALTH, -5), (WorkerKind.SERVER, 4),
                         (WorkerKind.WATCHER, 4), (WorkerKind.HANDLER, 4)]:
        seen: list[int] = []
        assert priority.apply(kind, conf, set_nice=seen.append,
                              current=lambda: 0)
        assert seen == [wanted]


def test_nothing_to_do_when_already_there(conf: cfg.ConfigOpts) -> None:
    seen: list[int] = []
    assert priority.apply(WorkerKind.SERVER, conf, set_nice=seen.append,
                          current=lambda: 4)
    assert seen == []


def test_refused_without_cap_sys_nice(conf: cfg.ConfigOpts,
                                      caplog: pytest.LogCaptureFixture) -> None:
    def refuse(value: int) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    with caplog.at_level(logging.WARNING):
        assert not priority.apply(WorkerKind.HEALTH, conf, set_nice=refuse,
                                  current=lambda: 0)
    (record,) = caplog.records
    assert "cannot set nice -5" in record.getMessage()
    assert "work_nice" in record.getMessage()
