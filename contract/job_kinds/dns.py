"""Job kinds of `dns`."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from contract.job_kinds.argtypes import (
    Bool,
    DnsLookupName,
    DnsName,
    DnsValue,
    DomainName,
    Id,
    Int,
    IPAddress,
    IPv4,
    IPv6,
    OnOff,
    Port,
)
from contract.job_kinds.base import INFRA, Args, JobKind, NoArgs, Result, kind

RecordType = Literal["A", "AAAA", "CNAME", "MX", "TXT", "SRV", "CAA", "NS"]
_HOSTNAME_RE = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+$")
_TLD_DIGITS = re.compile(r"\.[0-9]+$")
_SRV_RE = re.compile(r"^[0-9]{1,5} [0-9]{1,5} ")
_CAA_RE = re.compile(r"^(?:0|128) (?:issue|issuewild|iodef) [A-Za-z0-9.:/@_-]{1,200}$")


class Zone(Args):
    zone: DomainName


class ZoneAdd(Args):
    zone: DomainName
    ipv4: IPv4 | None = None  # the apex A record to create
    ipv6: IPv6 | None = None


class RecordAdd(Args):
    zone: DomainName
    type: RecordType
    name: DnsName = "@"
    value: DnsValue
    ttl: Int = Field(default=3600, ge=60, le=604_800)
    priority: Int | None = Field(default=None, ge=0, le=65535)  # MX and SRV only
    wildcard: Bool = False  # the record is for *.<name> (a '*' never travels in an argv)

    @model_validator(mode="after")
    def _value_matches_type(self) -> RecordAdd:
        value, kind_ = self.value, self.type
        if kind_ in ("A", "AAAA"):
            address = ipaddress.ip_address(value)
            if address.version != (4 if kind_ == "A" else 6):
                raise ValueError(f"an {kind_} record needs an IPv{4 if kind_ == 'A' else 6} address")
            self.value = str(address)
        elif kind_ in ("CNAME", "NS", "MX") and not (_HOSTNAME_RE.match(value) and not _TLD_DIGITS.search(value)):
            raise ValueError(f"a {kind_} record points to a lowercase host name with a dot")
        elif kind_ == "SRV" and not (
            _SRV_RE.match(value) and _HOSTNAME_RE.match(value.split(" ")[-1]) and value.count(" ") == 2
        ):
            raise ValueError("an SRV record value is 'weight port target'")
        elif kind_ == "CAA" and not _CAA_RE.match(value):
            raise ValueError("a CAA record value is 'flags tag value', e.g. '0 issue letsencrypt.org'")
        if kind_ == "CNAME" and self.name == "@":
            raise ValueError("a CNAME record cannot be at the zone apex")
        if (self.priority is not None) != (kind_ in ("MX", "SRV")):
            raise ValueError("priority is required for MX and SRV records and not allowed for others")
        return self


class RecordList(Args):
    zone: DomainName
    type: RecordType | None = None


class RecordDelete(Args):
    zone: DomainName
    id: Id


LookupType = Literal["A", "AAAA", "CNAME", "MX", "TXT", "SRV", "CAA", "NS", "SOA", "PTR"]


class DnsLookup(Args):
    name: DnsLookupName
    type: LookupType = "A"
    server: IPAddress | None = None  # None: the server's own resolvers (/etc/resolv.conf)
    port: Port | None = None  # the server's DNS port (53 unless given)


class Dnssec(Args):
    zone: DomainName
    state: OnOff


class DnsRecord(Result):
    id: str = Field(description="the record's id (r + 12 hex digits, from its name, type, priority and value)")
    name: str = Field(description="the owner name, relative to the zone (@: the apex)")
    type: str = Field(description="the record type (A, AAAA, CNAME, MX, TXT, SRV, CAA, NS...)")
    ttl: int = Field(description="time to live, seconds")
    value: str = Field(description="the record's data (a host name without its final dot, TXT unquoted)")
    priority: int | None = Field(description="the MX or SRV priority (None: other types)")


class ZoneRow(Result):
    zone: str = Field(description="the zone's name")
    serial: int = Field(description="its SOA serial (YYYYMMDDnn)")
    records: int = Field(description="how many records it holds")
    dnssec: bool = Field(description="named signs it")
    file: str = Field(description="its zone file, on the server")


class ZoneList(Result):
    zones: list[ZoneRow] = Field(description="the zones this server's named serves as primary")
    count: int = Field(description="how many")


class ZoneDetail(Result):
    zone: str = Field(description="the zone's name")
    serial: int = Field(description="its SOA serial (YYYYMMDDnn)")
    primary: str = Field(description="the SOA's primary name server")
    contact: str = Field(description="the SOA's contact (hostmaster.<zone>: an e-mail address with a dot for @)")
    dnssec: bool = Field(description="named signs it")
    file: str = Field(description="its zone file, on the server")
    records: list[DnsRecord] = Field(description="its records (not the SOA)")


class ZoneAdded(Result):
    zone: str = Field(description="the zone")
    created: bool = Field(description="it was made (False: it existed already, left as it was)")
    message: str = Field(description="what was done, for a person")


class ZoneDeleted(Result):
    zone: str = Field(description="the zone")
    deleted: bool = Field(description="it was removed with its files (False: there was none)")
    message: str = Field(description="what was done, for a person")


class RecordListResult(Result):
    zone: str = Field(description="the zone")
    records: list[DnsRecord] = Field(description="its records (of the type asked for, or all)")
    count: int = Field(description="how many")


class RecordAdded(DnsRecord):
    created: bool = Field(description="it was added (False: the same record was there already)")


class RecordDeleted(Result):
    zone: str = Field(description="the zone")
    deleted: DnsRecord | None = Field(description="the record removed (None: the zone had no such record)")
    message: str = Field(description="what was done, for a person")


class DnsAnswer(Result):
    model_config = ConfigDict(serialize_by_alias=True)  # dig's column is "class", a Python keyword

    name: str = Field(description="the owner name, fully qualified")
    ttl: int = Field(description="time to live left, seconds")
    record_class: str = Field(alias="class", description="the class (IN)")
    type: str = Field(description="the record type")
    value: str = Field(description="the record's data as dig prints it")


class LookupResult(Result):
    name: str = Field(description="the name looked up")
    type: str = Field(description="the record type asked for")
    server: str | None = Field(description="the server asked (None: the system's resolver)")
    status: str = Field(description="the response code (NOERROR, NXDOMAIN, SERVFAIL...)")
    answers: list[DnsAnswer] = Field(description="the answer section")


class ZoneCheck(Result):
    zone: str = Field(description="the zone")
    ok: bool = Field(description="no problem found")
    file_ok: bool = Field(description="named-checkzone accepts the zone file")
    serial: int = Field(description="the serial of the zone file")
    served_serial: int | None = Field(description="the serial named serves (None: it does not serve the zone)")
    dnssec: bool = Field(description="named signs it")
    problems: list[str] = Field(description="what is wrong, for a person")


_Z = {"zone": "example.com"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("dns.lookup", DnsLookup, "Look a name up with dig", read=True, positional=("name",),
         example={"name": "www.example.com", "type": "A", "server": "1.1.1.1"}, result=LookupResult),
    kind("dns.zone-list", NoArgs, "List the DNS zones", read=True, example={}, result=ZoneList),
    kind("dns.zone-show", Zone, "Show a zone with its records", read=True, positional=("zone",), example=_Z,
         result=ZoneDetail),
    kind("dns.zone-add", ZoneAdd, "Create a DNS zone", positional=("zone",),
         example={"zone": "example.com", "ipv4": "203.0.113.10"}, result=ZoneAdded),
    kind("dns.zone-delete", Zone, "Delete a DNS zone", positional=("zone",), example=_Z, result=ZoneDeleted,
         confirm="zone"),
    kind("dns.record-list", RecordList, "List the records of a zone", read=True, positional=("zone",),
         example={"zone": "example.com", "type": "MX"}, result=RecordListResult),
    kind("dns.record-add", RecordAdd, "Add a record to a zone", positional=("zone", "type"),
         example={"zone": "example.com", "type": "MX", "name": "@", "value": "mail.example.com", "priority": 10},
         result=RecordAdded),
    kind("dns.record-delete", RecordDelete, "Delete a record", positional=("zone", "id"),
         example={"zone": "example.com", "id": "r-42"}, result=RecordDeleted),
    kind("dns.dnssec-set", Dnssec, "Turn DNSSEC signing of a zone on or off", positional=("zone", "state"),
         example={"zone": "example.com", "state": "on"}),
    kind("dns.check", Zone, "Check delegation and resolution of a zone", read=True, positional=("zone",),
         example=_Z, result=ZoneCheck),
]  # fmt: skip
