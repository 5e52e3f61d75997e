"""``ssl list --json``: the certificates of this server and when they expire.

Certificates are ``/etc/letsencrypt/live/*/cert.pem`` and ``<state_dir>/ssl/*.pem``; each is
read with ``openssl x509 -noout -subject -enddate -issuer -ext subjectAltName``. A file openssl
cannot read is listed with its error; none found is an empty list.
"""

from __future__ import annotations

import glob
import os
import time
from datetime import UTC, datetime
from typing import Any

from agent.jobs.base import JobContext, JobError, Output, handler
from agent.jobs.proc import capture_command, which
from api_client.job_kinds.base import NoArgs

LETSENCRYPT_LIVE = "/etc/letsencrypt/live"


def certificate_paths(state_dir: str, letsencrypt_live: str = LETSENCRYPT_LIVE) -> list[str]:
    paths = sorted(glob.glob(os.path.join(glob.escape(letsencrypt_live), "*", "cert.pem")))
    paths += sorted(glob.glob(os.path.join(glob.escape(os.path.join(state_dir, "ssl")), "*.pem")))
    return paths


def parse_x509(text: str) -> dict[str, Any]:
    """The fields of ``openssl x509 -noout -subject -enddate -issuer -ext subjectAltName``."""
    result: dict[str, Any] = {"subject": None, "issuer": None, "not_after": None, "names": []}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("subject="):
            result["subject"] = line.removeprefix("subject=").strip()
        elif line.startswith("issuer="):
            result["issuer"] = line.removeprefix("issuer=").strip()
        elif line.startswith("notAfter="):
            raw = " ".join(line.removeprefix("notAfter=").split())
            try:
                when = datetime.strptime(raw, "%b %d %H:%M:%S %Y GMT").replace(tzinfo=UTC)
            except ValueError:
                result["not_after"] = raw
            else:
                result["not_after"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
                result["days_left"] = int((when.timestamp() - time.time()) // 86400)
                result["expired"] = when.timestamp() < time.time()
        elif line.startswith("X509v3 Subject Alternative Name") and i + 1 < len(lines):
            names = [n.strip() for n in lines[i + 1].split(",") if n.strip()]
            result["names"] = [n.split(":", 1)[1] if n.startswith("DNS:") else n for n in names]
    subject = result["subject"] or ""
    if not result["names"] and "CN = " in subject:
        result["names"] = [subject.split("CN = ", 1)[1].split(",")[0].strip()]
    return result


async def read_certificate(openssl: str, path: str) -> dict[str, Any]:
    argv = [openssl, "x509", "-noout", "-subject", "-enddate", "-issuer", "-ext", "subjectAltName", "-in", path]
    code, text, err = await capture_command(argv)
    source = "letsencrypt" if path.startswith(LETSENCRYPT_LIVE + "/") else "agent"
    if code != 0 or "notAfter=" not in text:
        first = next((line for line in err.splitlines() if line.strip()), f"exit {code}")
        return {"path": path, "source": source, "error": f"not a readable certificate: {first.strip()}"}
    return {"path": path, "source": source, **parse_x509(text)}


async def _list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    paths = certificate_paths(ctx.state_dir)
    certificates = []
    if paths:
        openssl = which("openssl")
        if openssl is None:
            raise JobError("openssl is not installed on this server: it is needed to read the certificates")
        certificates = [await read_certificate(openssl, path) for path in paths]
    out.result({"certificates": certificates}, as_json=ctx.as_json)
    return 0


KINDS = [
    handler("ssl.list", _list),
]
