"""What a kind needs on this host to run, declared once beside its handler (Salt's ``__virtual__``).

A domain module says what all its kinds need (``NEEDS``) and a handler what its own kind needs
besides (``handler(kind, run, needs=...)``): a tool on the system PATH, a tool the host layout
names (the tests' own instances), a file or folder a Debian package installs, or any file of a
glob (one version or another of a versioned package). The agent checks
them at start and after package changes (`agent.jobs.availability`) and announces, per kind,
"runs here" or "needs <package>"; `run_kind` checks them again before a job runs, so a kind whose
software vanished since the check ends with exit 69 naming the package, never with a traceback.

A need is checked with a few ``stat`` calls: no process is started, nothing is read.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from agent.jobs.toolkit.host import HostLayout
from agent.jobs.toolkit.output import EXIT_MISSING, JobError
from agent.jobs.toolkit.proc import PACKAGES, which


class Need:
    """One thing a kind needs on this host: `missing` says whether it is absent."""

    package: str  # the Debian package that brings it: what the announcement names

    def missing(self, host: HostLayout) -> str | None:
        """What is absent (a sentence's subject: "nft", "/etc/bind"), or None when it is here."""
        raise NotImplementedError


@dataclass(frozen=True)
class Tool(Need):
    """A program on the system PATH (`which`); its package is the one `proc.PACKAGES` knows."""

    name: str
    package: str = ""

    def __post_init__(self) -> None:
        if not self.package:
            object.__setattr__(self, "package", PACKAGES.get(self.name, self.name))

    def missing(self, host: HostLayout) -> str | None:
        return None if which(self.name) is not None else self.name


@dataclass(frozen=True)
class HostTool(Need):
    """A program the host layout names (`pick` reads it: an argv's first item, a name or a path),
    looked for as `require` would: a path must be an executable file, a name on the system PATH."""

    pick: Callable[[HostLayout], str]
    package: str

    def missing(self, host: HostLayout) -> str | None:
        tool = self.pick(host)
        if "/" in tool:
            return None if os.path.isfile(tool) and os.access(tool, os.X_OK) else tool
        return None if which(tool) is not None else tool


@dataclass(frozen=True)
class HostPath(Need):
    """A file or folder that the package installs, where the host layout says (`pick` reads it)."""

    pick: Callable[[HostLayout], str]
    package: str

    def missing(self, host: HostLayout) -> str | None:
        path = self.pick(host)
        return None if os.path.exists(path) else path


@dataclass(frozen=True)
class AnyFile(Need):
    """At least one file matching the glob `pattern` (any version of a versioned package: the
    ``/usr/sbin/php-fpm8.2`` of ``php8.2-fpm``)."""

    pattern: str
    package: str

    def missing(self, host: HostLayout) -> str | None:
        return None if glob.glob(self.pattern) else self.pattern


@dataclass(frozen=True)
class Unmet:
    """The first need of a kind that this host lacks."""

    package: str
    absent: str  # what is not there (a tool's name, a path)


def first_unmet(needs: Iterable[Need], host: HostLayout) -> Unmet | None:
    """The first of `needs` this host lacks, or None when the kind runs here."""
    for need in needs:
        absent = need.missing(host)
        if absent is not None:
            return Unmet(need.package, absent)
    return None


def unmet_by_kind(needs: Mapping[str, Iterable[Need]], host: HostLayout) -> dict[str, str]:
    """``{kind: package}`` for each kind of `needs` that cannot run on this host now, sorted by kind.

    Args:
        needs: each kind's declared needs (a kind without any always runs here).
        host: the host layout now (where the services' tools and files are).
    """
    found: dict[str, str] = {}
    for kind in sorted(needs):
        unmet = first_unmet(needs[kind], host)
        if unmet is not None:
            found[kind] = unmet.package
    return found


def check_needs(kind: str, needs: Iterable[Need], host: HostLayout) -> None:
    """Refuse to start `kind` when one of its needs vanished since availability was announced.

    Raises:
        JobError: exit `EXIT_MISSING`, naming what is absent and its Debian package.
    """
    unmet = first_unmet(needs, host)
    if unmet is not None:
        raise JobError(
            f"{unmet.absent} is not on this server (Debian package {unmet.package}): {kind} needs it", EXIT_MISSING
        )


__all__ = ["AnyFile", "HostPath", "HostTool", "Need", "Tool", "Unmet", "check_needs", "first_unmet", "unmet_by_kind"]
