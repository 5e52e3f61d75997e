"""``dns.*``: lookups with ``dig``, and the authoritative zones this server serves with bind9.

The zones are the agent's own: one zone file per zone in ``bind.zones_dir`` (``<zone>.zone``,
written by `render_zone`, read back by `parse_zone`) and one ``zone`` statement per line in
``bind.zones_conf``, a file of its own that named's configuration includes (on Debian:
``include "/etc/bind/named.conf.fleetdeck";`` in ``/etc/bind/named.conf.local``; a zone-add
whose zone named's configuration does not show says so and changes nothing).

Every change is checked before named sees it: the candidate zone file (serial bumped,
``YYYYMMDDnn``) by ``named-checkzone``, the candidate statements by ``named-checkconf``; only
then are they moved into place and named told (``rndc reload <zone>`` for a zone's records,
``rndc reconfig`` when zones come or go). A refused candidate changes nothing: named keeps
serving the previous zone and the job exits 78 with the tool's words.

A record's id is a hash of its name, type, priority and value: the same record always has the
same id, so ``record-delete`` needs no record of its own.
"""

from __future__ import annotations

import contextlib
import glob
import grp
import hashlib
import os
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

import trio

from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.host import BindLayout
from agent.jobs.toolkit.needs import HostTool, Tool
from agent.jobs.toolkit.output import EXIT_REFUSED, JobError, Output
from agent.jobs.toolkit.proc import capture_command, require
from agent.sites import write_atomically
from contract.job_kinds.base import NoArgs
from contract.job_kinds.dns import DnsLookup, Dnssec, RecordAdd, RecordDelete, RecordList, Zone, ZoneAdd

ZONE_SUFFIX = ".zone"
DEFAULT_TTL = 3600
SOA_TIMERS = (3600, 900, 1_209_600, 300)  # refresh, retry, expire, negative-caching TTL
HOSTNAME_TYPES = ("CNAME", "NS", "MX", "SRV")  # their value ends with a host name (absolute in the file)
DIG_NO_REPLY = 9

# The changes of one agent are serialised (two jobs editing one zone must not interleave).
_CHANGES = trio.Lock()


# --- records and zone files ------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One resource record, as the kinds show it: `name` relative to the zone (``@``, ``www``,
    ``*.dev``), host names in `value` without their final dot, TXT and CAA values unquoted."""

    name: str
    type: str
    value: str
    ttl: int = DEFAULT_TTL
    priority: int | None = None

    @property
    def id(self) -> str:
        key = f"{self.name}|{self.type}|{self.priority}|{self.value}".lower()
        return "r" + hashlib.sha256(key.encode()).hexdigest()[:12]

    def rdata(self) -> str:
        value = self.value
        if self.type in HOSTNAME_TYPES:
            value = value.rstrip(".") + "."
        elif self.type == "TXT":
            value = f'"{value}"'
        elif self.type == "CAA":
            flags, tag, target = value.split(" ", 2)
            value = f'{flags} {tag} "{target}"'
        return value if self.priority is None else f"{self.priority} {value}"

    def line(self) -> str:
        return f"{self.name} {self.ttl} IN {self.type} {self.rdata()}"

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "type": self.type,
            "ttl": self.ttl,
            "value": self.value,
            "priority": self.priority,
        }


def record_from_rdata(name: str, ttl: int, rtype: str, rdata: str) -> Record:
    """The `Record` of a zone-file line (the inverse of `Record.rdata`)."""
    priority: int | None = None
    if rtype in ("MX", "SRV"):
        first, _, rdata = rdata.partition(" ")
        priority = int(first)
    if rtype in HOSTNAME_TYPES:
        head, _, target = rdata.rpartition(" ")
        rdata = f"{head} {target.rstrip('.')}" if head else target.rstrip(".")
    elif rtype == "TXT":
        rdata = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', rdata)) if rdata.startswith('"') else rdata
    elif rtype == "CAA":
        rdata = rdata.replace('"', "")
    return Record(name, rtype, rdata, ttl, priority)


@dataclass
class ZoneData:
    """A zone file's content: its SOA (primary name server, contact, serial) and its records."""

    zone: str
    serial: int
    primary: str
    contact: str
    records: list[Record] = field(default_factory=list)

    def find(self, record_id: str) -> Record | None:
        return next((r for r in self.records if r.id == record_id), None)


def next_serial(current: int, today: str | None = None) -> int:
    """The next ``YYYYMMDDnn`` serial: today's first, or one more than `current` if that is later."""
    day = int(today or time.strftime("%Y%m%d", time.gmtime()))
    return max(current + 1, day * 100)


def render_zone(data: ZoneData) -> str:
    refresh, retry, expire, minimum = SOA_TIMERS
    lines = [
        f"; zone {data.zone}: written by the fleetdeck agent (dns.* jobs); edits here are kept only",
        "; while they stay in this format (one record per line)",
        f"$ORIGIN {data.zone}.",
        f"$TTL {DEFAULT_TTL}",
        f"@ {DEFAULT_TTL} IN SOA {data.primary}. {data.contact}. {data.serial} {refresh} {retry} {expire} {minimum}",
        *(record.line() for record in data.records),
    ]
    return "\n".join(lines) + "\n"


_RECORD_LINE = re.compile(r"^(?P<name>\S+)\s+(?P<ttl>\d+)\s+IN\s+(?P<type>[A-Z]+)\s+(?P<rdata>.+?)\s*$")


def parse_zone(zone: str, text: str) -> ZoneData:
    """A zone file written by `render_zone` (one record per line, explicit TTL and class)."""
    data = ZoneData(zone, 0, f"ns1.{zone}", f"hostmaster.{zone}")
    for raw in text.splitlines():
        line = raw.strip()
        match = _RECORD_LINE.match(line) if line and line[0] not in ";$" else None
        if match is None:
            continue
        rtype, rdata = match["type"], " ".join(match["rdata"].split()) if match["type"] != "TXT" else match["rdata"]
        if rtype == "SOA":
            primary, contact, serial, *_ = rdata.split()
            data.primary, data.contact, data.serial = primary.rstrip("."), contact.rstrip("."), int(serial)
        else:
            data.records.append(record_from_rdata(match["name"], int(match["ttl"]), rtype, rdata))
    return data


# --- the zone statements ---------------------------------------------------------------------

_STATEMENT = re.compile(r'^zone "(?P<zone>[^"]+)" \{ type primary; file "(?P<file>[^"]+)";(?P<options>.*)\};$')
DNSSEC_ON = "dnssec-policy default;"
DNSSEC_OFF = "dnssec-policy insecure;"  # bind's way back to unsigned: DNSKEYs withdrawn as TTLs allow


@dataclass(frozen=True)
class ZoneEntry:
    zone: str
    file: str
    dnssec: str | None = None  # "on", "off" (unsigning) or None (never signed)

    def statement(self, key_dir: str) -> str:
        options = ""
        if self.dnssec is not None:
            policy = DNSSEC_ON if self.dnssec == "on" else DNSSEC_OFF
            options = f' {policy} inline-signing yes; key-directory "{key_dir}";'
        return f'zone "{self.zone}" {{ type primary; file "{self.file}";{options} }};'


def parse_statements(text: str) -> dict[str, ZoneEntry]:
    entries = {}
    for line in text.splitlines():
        match = _STATEMENT.match(line.strip())
        if match is not None:
            options = match["options"]
            dnssec = "on" if DNSSEC_ON in options else "off" if DNSSEC_OFF in options else None
            entries[match["zone"]] = ZoneEntry(match["zone"], match["file"], dnssec)
    return entries


def render_statements(entries: dict[str, ZoneEntry], key_dir: str) -> str:
    header = "// the zones of the fleetdeck agent (dns.* jobs): one statement per line, rewritten on each change"
    return "\n".join([header, *(entries[z].statement(key_dir) for z in sorted(entries))]) + "\n"


def key_dir(layout: BindLayout) -> str:
    return os.path.join(layout.zones_dir, "keys")


def read_statements(layout: BindLayout) -> dict[str, ZoneEntry]:
    try:
        with open(layout.zones_conf) as f:
            return parse_statements(f.read())
    except FileNotFoundError:
        return {}


def zone_entry(layout: BindLayout, zone: str) -> ZoneEntry:
    entry = read_statements(layout).get(zone)
    if entry is None:
        raise JobError(f"no zone {zone} on this server")
    return entry


def read_zone(entry: ZoneEntry) -> ZoneData:
    try:
        with open(entry.file) as f:
            return parse_zone(entry.zone, f.read())
    except FileNotFoundError:
        raise JobError(f"the zone file of {entry.zone} ({entry.file}) is missing") from None


# --- checking and telling named --------------------------------------------------------------


def _words(text: str, limit: int = 800) -> str:
    return " ".join(text.split())[-limit:]


async def check_zone_file(zone: str, path: str) -> tuple[bool, str]:
    """``named-checkzone``: whether named would load `path` as `zone`, and what the tool said."""
    tool = require("named-checkzone", "check a zone before named loads it")
    code, text, err = await capture_command([tool, zone, path])
    return code == 0, (text + err).strip()


async def check_conf(path: str) -> tuple[bool, str]:
    tool = require("named-checkconf", "check named's configuration before it is reloaded")
    code, text, err = await capture_command([tool, path])
    return code == 0, (text + err).strip()


async def rndc(layout: BindLayout, *command: str) -> None:
    prefix = list(layout.rndc)
    prefix[0] = require(prefix[0], "tell named about the change") if "/" not in prefix[0] else prefix[0]
    code, text, err = await capture_command([*prefix, *command])
    if code != 0:
        raise JobError(f"rndc {' '.join(command)} failed (exit {code}): {_words(err or text)}")


def _discard(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _make_zones_dir(layout: BindLayout) -> None:
    """The zones folder (and its keys folder), writable by named's group where there is one:
    inline signing writes its ``.signed`` files and journals beside the zone file."""
    for folder in (layout.zones_dir, key_dir(layout)):
        os.makedirs(folder, mode=0o755, exist_ok=True)
        try:
            os.chown(folder, -1, grp.getgrnam("bind").gr_gid)
            os.chmod(folder, 0o2775)
        except (KeyError, PermissionError):
            pass  # no bind group (named runs as root, as in the tests) or not root


async def write_zone_checked(data: ZoneData, path: str) -> None:
    """Write `data` to `path` only if ``named-checkzone`` accepts it (else exit 78, nothing changed)."""
    candidate = path + ".candidate"
    write_atomically(candidate, render_zone(data).encode(), 0o644)
    try:
        ok, said = await check_zone_file(data.zone, candidate)
        if not ok:
            raise JobError(f"named-checkzone refused the change to {data.zone}: {_words(said)}", EXIT_REFUSED)
        os.replace(candidate, path)
    finally:
        _discard(candidate)


async def write_statements_checked(layout: BindLayout, entries: dict[str, ZoneEntry], zone: str) -> None:
    """Replace the zone statements with `entries`, checked alone and then within named's whole
    configuration (which must show `zone` if it is among `entries`); any refusal puts the previous
    statements back and exits 78."""
    text = render_statements(entries, key_dir(layout))
    candidate = layout.zones_conf + ".candidate"
    write_atomically(candidate, text.encode(), 0o644)
    try:
        ok, said = await check_conf(candidate)
        if not ok:
            raise JobError(f"named-checkconf refused the zone statements: {_words(said)}", EXIT_REFUSED)
        previous = _read_bytes(layout.zones_conf)
        os.replace(candidate, layout.zones_conf)
    finally:
        _discard(candidate)
    ok, said = await check_conf(layout.named_conf)
    refusal = None if ok else f"named-checkconf {layout.named_conf} refused the change: {_words(said)}"
    if refusal is None and zone in entries and not await _included(layout, zone):
        refusal = (
            f"{layout.named_conf} does not include {layout.zones_conf}: add the line "
            f'include "{layout.zones_conf}"; (on Debian to /etc/bind/named.conf.local)'
        )
    if refusal is not None:
        if previous is None:
            _discard(layout.zones_conf)
        else:
            write_atomically(layout.zones_conf, previous, 0o644)
        raise JobError(refusal, EXIT_REFUSED)


async def _included(layout: BindLayout, zone: str) -> bool:
    """Whether named's whole configuration (includes expanded by ``named-checkconf -p``) has `zone`."""
    tool = require("named-checkconf", "check named's configuration")
    code, text, _ = await capture_command([tool, "-p", layout.named_conf])
    return code == 0 and f'zone "{zone}"' in text


async def change_records(ctx: JobContext, zone: str, change: Any) -> Any:
    """Apply `change(data)` to the zone's records, then check, write and reload it. `change`
    returns what the job prints and whether anything changed."""
    layout = ctx.host.bind
    async with _CHANGES:
        entry = zone_entry(layout, zone)
        data = read_zone(entry)
        shown, changed = change(data)
        if changed:
            data.serial = next_serial(data.serial)
            await write_zone_checked(data, entry.file)
            await rndc(layout, "reload", zone)
        return shown


# --- the kinds -------------------------------------------------------------------------------


async def _zone_list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    zones = []
    for entry in read_statements(ctx.host.bind).values():
        data = read_zone(entry)
        zones.append(
            {
                "zone": entry.zone,
                "serial": data.serial,
                "records": len(data.records),
                "dnssec": entry.dnssec == "on",
                "file": entry.file,
            }
        )
    out.result({"zones": zones, "count": len(zones)}, as_json=ctx.as_json)
    return 0


def _zone_json(entry: ZoneEntry, data: ZoneData) -> dict[str, Any]:
    return {
        "zone": entry.zone,
        "serial": data.serial,
        "primary": data.primary,
        "contact": data.contact,
        "dnssec": entry.dnssec == "on",
        "file": entry.file,
        "records": [r.as_json() for r in data.records],
    }


async def _zone_show(args: Zone, ctx: JobContext, out: Output) -> int:
    entry = zone_entry(ctx.host.bind, args.zone)
    out.result(_zone_json(entry, read_zone(entry)), as_json=ctx.as_json)
    return 0


def new_zone(zone: str, args: ZoneAdd, nameservers: list[str]) -> ZoneData:
    """A zone's first content: SOA, NS (the layout's name servers, else ``ns1.<zone>`` at the
    zone's own addresses) and the apex addresses."""
    addresses = [Record("@", rtype, value) for rtype, value in (("A", args.ipv4), ("AAAA", args.ipv6)) if value]
    if nameservers:
        servers, glue = nameservers, []
    elif addresses:
        servers, glue = [f"ns1.{zone}"], [replace(a, name="ns1") for a in addresses]
    else:
        raise JobError(f"{zone} needs a name server: give ipv4/ipv6 (ns1.{zone}) or set bind.nameservers")
    ns = [Record("@", "NS", server) for server in servers]
    return ZoneData(zone, next_serial(0), servers[0], f"hostmaster.{zone}", [*ns, *addresses, *glue])


async def _zone_add(args: ZoneAdd, ctx: JobContext, out: Output) -> int:
    layout = ctx.host.bind
    async with _CHANGES:
        entries = read_statements(layout)
        if args.zone in entries:
            message = f"zone {args.zone} exists already"
            out.result({"zone": args.zone, "created": False, "message": message}, as_json=ctx.as_json)
            return 0
        _make_zones_dir(layout)
        path = os.path.join(layout.zones_dir, args.zone + ZONE_SUFFIX)
        data = new_zone(args.zone, args, list(layout.nameservers))
        await write_zone_checked(data, path)
        entries[args.zone] = ZoneEntry(args.zone, path)
        try:
            await write_statements_checked(layout, entries, args.zone)
        except JobError:
            os.unlink(path)
            raise
        await rndc(layout, "reconfig")
    message = f"zone {args.zone} added (serial {data.serial}, {len(data.records)} records)"
    out.result({"zone": args.zone, "created": True, "message": message}, as_json=ctx.as_json)
    return 0


def zone_files(entry: ZoneEntry, keys: str) -> list[str]:
    """What named and the agent keep for a zone: its file, journals, signed copy and keys."""
    return sorted({*glob.glob(glob.escape(entry.file) + "*"), *glob.glob(os.path.join(keys, f"K{entry.zone}.+*"))})


async def _zone_delete(args: Zone, ctx: JobContext, out: Output) -> int:
    layout = ctx.host.bind
    async with _CHANGES:
        entries = read_statements(layout)
        entry = entries.pop(args.zone, None)
        if entry is None:
            message = f"no zone {args.zone} on this server: nothing to delete"
            out.result({"zone": args.zone, "deleted": False, "message": message}, as_json=ctx.as_json)
            return 0
        await write_statements_checked(layout, entries, args.zone)
        await rndc(layout, "reconfig")
        for path in zone_files(entry, key_dir(layout)):
            os.unlink(path)
    out.result({"zone": args.zone, "deleted": True, "message": f"zone {args.zone} deleted"}, as_json=ctx.as_json)
    return 0


async def _record_list(args: RecordList, ctx: JobContext, out: Output) -> int:
    data = read_zone(zone_entry(ctx.host.bind, args.zone))
    records = [r.as_json() for r in data.records if args.type is None or r.type == args.type]
    out.result({"zone": args.zone, "records": records, "count": len(records)}, as_json=ctx.as_json)
    return 0


def record_of(args: RecordAdd) -> Record:
    name = args.name
    if args.wildcard:
        name = "*" if name == "@" else f"*.{name}"
    return Record(name, args.type, args.value, args.ttl, args.priority)


async def _record_add(args: RecordAdd, ctx: JobContext, out: Output) -> int:
    record = record_of(args)

    def add(data: ZoneData) -> tuple[dict[str, Any], bool]:
        existing = data.find(record.id)
        if existing is not None:
            return {**existing.as_json(), "created": False}, False
        data.records.append(record)
        return {**record.as_json(), "created": True}, True

    out.result(await change_records(ctx, args.zone, add), as_json=ctx.as_json)
    return 0


async def _record_delete(args: RecordDelete, ctx: JobContext, out: Output) -> int:
    def delete(data: ZoneData) -> tuple[dict[str, Any], bool]:
        record = data.find(args.id)
        if record is None:
            message = f"no record {args.id} in {args.zone}: nothing to delete"
            return {"zone": args.zone, "deleted": None, "message": message}, False
        data.records.remove(record)
        return {"zone": args.zone, "deleted": record.as_json(), "message": f"deleted {record.line()}"}, True

    out.result(await change_records(ctx, args.zone, delete), as_json=ctx.as_json)
    return 0


async def _dnssec_set(args: Dnssec, ctx: JobContext, out: Output) -> int:
    layout = ctx.host.bind
    async with _CHANGES:
        entries = read_statements(layout)
        entry = entries.get(args.zone)
        if entry is None:
            raise JobError(f"no zone {args.zone} on this server")
        if (entry.dnssec or "off") == args.state:
            out.stdout(f"DNSSEC of {args.zone} is {args.state} already")
            return 0
        if args.state == "on":
            _make_zones_dir(layout)
        entries[args.zone] = replace(entry, dnssec=args.state)
        await write_statements_checked(layout, entries, args.zone)
        await rndc(layout, "reconfig")
    if args.state == "on":
        out.stdout(f"DNSSEC of {args.zone} on: named signs it (dnssec-policy default, inline signing)")
    else:
        out.stdout(f"DNSSEC of {args.zone} off: named withdraws its signatures as their TTLs allow")
    return 0


async def dig(argv_tail: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """``dig +noall +answer +comments``: the response status and the answer records."""
    tool = require("dig", "look names up")
    code, text, err = await capture_command([tool, "+noall", "+answer", "+comments", "+time=3", "+tries=2", *argv_tail])
    if code == DIG_NO_REPLY:
        raise JobError(f"no answer from the DNS server: {_words(text + err)}")
    if code != 0:
        raise JobError(f"dig failed (exit {code}): {_words(err or text)}")
    return parse_dig(text)


_STATUS = re.compile(r"status: ([A-Z]+)")


def parse_dig(text: str) -> tuple[str, list[dict[str, Any]]]:
    """The status of the header comment and the answer lines (name, ttl, class, type, value)."""
    status, answers = "NOERROR", []
    for line in text.splitlines():
        if line.startswith(";"):
            found = _STATUS.search(line) if "HEADER" in line else None
            status = found.group(1) if found else status
            continue
        parts = line.split(None, 4)
        if len(parts) == 5:
            name, ttl, klass, rtype, value = parts
            answers.append({"name": name, "ttl": int(ttl), "class": klass, "type": rtype, "value": value.strip()})
    return status, answers


async def _lookup(args: DnsLookup, ctx: JobContext, out: Output) -> int:
    where = [f"@{args.server}"] if args.server else []
    port = ["-p", str(args.port)] if args.port else []
    status, answers = await dig([*where, *port, args.name, args.type])
    result = {"name": args.name, "type": args.type, "server": args.server, "status": status, "answers": answers}
    out.result(result, as_json=ctx.as_json)
    return 0


async def _check(args: Zone, ctx: JobContext, out: Output) -> int:
    """The zone file as named-checkzone sees it, and the zone as this server's named serves it."""
    layout = ctx.host.bind
    entry = zone_entry(layout, args.zone)
    data = read_zone(entry)
    file_ok, said = await check_zone_file(args.zone, entry.file)
    try:
        status, answers = await dig(["@127.0.0.1", "-p", str(layout.port), args.zone, "SOA"])
    except JobError as exc:
        status, answers = f"no answer ({exc})", []
    served = [int(a["value"].split()[2]) for a in answers if a["type"] == "SOA"]
    problems = [] if file_ok else [said]
    if status != "NOERROR" or not served:
        problems.append(f"named does not serve {args.zone} ({status})")
    elif served[0] < data.serial:
        problems.append(f"named serves serial {served[0]}, the file has {data.serial} (not reloaded yet)")
    result = {
        "zone": args.zone,
        "ok": not problems,
        "file_ok": file_ok,
        "serial": data.serial,
        "served_serial": served[0] if served else None,
        "dnssec": entry.dnssec == "on",
        "problems": problems,
    }
    out.result(result, as_json=ctx.as_json)
    return 0


# What named's kinds need: named itself, and the rndc the host layout names (the tests' own
# instance is told with -c/-s/-p); dns.lookup only asks, with dig.
BIND = (Tool("named", "bind9"), HostTool(lambda host: host.bind.rndc[0], "bind9-utils"))

KINDS = [
    handler("dns.lookup", _lookup, needs=(Tool("dig"),)),
    handler("dns.zone-list", _zone_list, needs=BIND),
    handler("dns.zone-show", _zone_show, needs=BIND),
    handler("dns.zone-add", _zone_add, needs=BIND),
    handler("dns.zone-delete", _zone_delete, needs=BIND),
    handler("dns.record-list", _record_list, needs=BIND),
    handler("dns.record-add", _record_add, needs=BIND),
    handler("dns.record-delete", _record_delete, needs=BIND),
    handler("dns.dnssec-set", _dnssec_set, needs=BIND),
    handler("dns.check", _check, needs=BIND),
]
