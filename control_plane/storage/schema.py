"""The tables, as SQLAlchemy Core objects. Their history is in `migrations/`: change both together."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

# Ids and sequence numbers that only grow (audit entries, job output lines, presence events):
# 64-bit. PostgreSQL's INTEGER is 32-bit, and 2**31 audit entries or output lines is within a
# large fleet's reach. SQLite's INTEGER is 64-bit already, and only a column declared "INTEGER
# PRIMARY KEY" is its rowid (numbered by SQLite itself): it stays INTEGER there.
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

orgs = sa.Table(
    "orgs",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("name", sa.String, nullable=False, unique=True),
    sa.Column("plan", sa.String, nullable=False),
    sa.Column("created_at", sa.String, nullable=False),
)

users = sa.Table(
    "users",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("email", sa.String, nullable=False, unique=True),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("password_hash", sa.String, nullable=False),
    sa.Column("super_admin", sa.Boolean, nullable=False, default=False),
    sa.Column("created_at", sa.String, nullable=False),
)

memberships = sa.Table(
    "memberships",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("user_id", sa.String, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("org_id", sa.String, sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("role", sa.String, nullable=False),
    # A JSON list that narrows the role's capabilities; NULL keeps them all.
    sa.Column("capabilities", sa.String, nullable=True),
    sa.Column("created_at", sa.String, nullable=False),
    sa.UniqueConstraint("user_id", "org_id"),
)

# Session tokens and API tokens: only a SHA-256 of the secret is kept.
tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("kind", sa.String, nullable=False),  # "session" | "api"
    sa.Column("token_hash", sa.String, nullable=False, unique=True),
    sa.Column("user_id", sa.String, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("org_id", sa.String, sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("name", sa.String, nullable=True),
    sa.Column("created_at", sa.String, nullable=False),
    sa.Column("expires_at", sa.String, nullable=True),
)

# Failed logins within the login throttle's window (`auth.throttle`), one row per failure and key,
# so that every replica on this database counts the same failures. A key is a SHA-256 of what it
# counts (an account and a source address, or a source address): nothing typed is kept. Rows older
# than the window are deleted as new ones come.
login_failures = sa.Table(
    "login_failures",
    metadata,
    sa.Column("id", BIG_ID, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String, nullable=False),
    sa.Column("at", sa.Float, nullable=False),  # seconds since the epoch: every replica's clock
    sa.Index("ix_login_failures_key_at", "key", "at"),
    sa.Index("ix_login_failures_at", "at"),
)

servers = sa.Table(
    "servers",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("org_id", sa.String, sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("address", sa.String, nullable=True),
    sa.Column("agent_token_hash", sa.String, nullable=True, unique=True),
    sa.Column("agent_version", sa.String, nullable=True),
    sa.Column("agent_connected_at", sa.String, nullable=True),
    sa.Column("agent_last_seen_at", sa.String, nullable=True),
    # JSON list of the job kinds the agent announced in its last hello; NULL: it never said.
    sa.Column("agent_job_kinds", sa.String, nullable=True),
    sa.Column("created_at", sa.String, nullable=False),
    # Which replica holds the agent's link, and which link (NULL: no replica said it does).
    sa.Column("agent_replica_id", sa.String, nullable=True),
    sa.Column("agent_link_id", sa.String, nullable=True),
    # The address that link comes from, as its replica sees it (a cross-server copy's source IP).
    sa.Column("agent_peer", sa.String, nullable=True),
    sa.UniqueConstraint("org_id", "name"),
)

# The control-plane processes on this database, each with its last heartbeat.
replicas = sa.Table(
    "replicas",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("started_at", sa.String, nullable=False),
    sa.Column("heartbeat_at", sa.Float, nullable=False),
)

# With replicas: the presence feed's events, numbered here so that every replica's feed has the
# same ids (a client resumes on any of them with Last-Event-ID). Only the newest are kept.
presence_events = sa.Table(
    "presence_events",
    metadata,
    sa.Column("id", BIG_ID, primary_key=True, autoincrement=True),
    sa.Column("org_id", sa.String, nullable=False),
    sa.Column("payload", sa.String, nullable=False),
)

audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", BIG_ID, primary_key=True, autoincrement=True),
    sa.Column("at", sa.String, nullable=False),
    sa.Column("org_id", sa.String, nullable=True),
    sa.Column("user_id", sa.String, nullable=True),
    sa.Column("actor_email", sa.String, nullable=True),
    sa.Column("server_id", sa.String, nullable=True),
    sa.Column("action", sa.String, nullable=False),
    sa.Column("target", sa.String, nullable=True),
    sa.Column("details", sa.String, nullable=False),  # JSON, secrets already masked
    sa.Column("outcome", sa.String, nullable=False),
    sa.Column("error_code", sa.String, nullable=True),
    sa.Index("ix_audit_org_at", "org_id", "id"),
)

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("org_id", sa.String, sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("server_id", sa.String, sa.ForeignKey("servers.id", ondelete="CASCADE"), nullable=False),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("args", sa.String, nullable=False),  # JSON, secret fields already "***"
    sa.Column("argv", sa.String, nullable=False),  # JSON; never holds a secret
    sa.Column("status", sa.String, nullable=False),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("result", sa.String, nullable=True),  # JSON of a read's output
    sa.Column("cached", sa.Boolean, nullable=False, default=False),
    sa.Column("cached_at", sa.String, nullable=True),
    sa.Column("created_by", sa.String, nullable=True),
    sa.Column("idempotency_key", sa.String, nullable=True),
    sa.Column("lookup", sa.Boolean, nullable=False, server_default=sa.false()),  # a client's own read
    sa.Column("agent_boot_id", sa.String, nullable=True),
    sa.Column("created_at", sa.String, nullable=False),
    sa.Column("started_at", sa.String, nullable=True),
    sa.Column("finished_at", sa.String, nullable=True),
    sa.UniqueConstraint("server_id", "created_by", "idempotency_key"),
    sa.Index("ix_jobs_server_created", "server_id", "created_at"),
)

# A job's captured output, in chunks of consecutive lines (a JSON list of runs {seq, stream, at,
# texts}, or of line objects in rows written before runs; secrets already masked). A row per line
# made the inserts the hottest thing in the process.
job_output = sa.Table(
    "job_output",
    metadata,
    sa.Column("job_id", sa.String, sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("first_seq", BIG_ID, primary_key=True),
    sa.Column("last_seq", BIG_ID, nullable=False),
    sa.Column("lines", sa.LargeBinary, nullable=False),
)

# The last successful result of each read (kind, args) per server: answered while its agent is offline.
read_cache = sa.Table(
    "read_cache",
    metadata,
    sa.Column("server_id", sa.String, sa.ForeignKey("servers.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("kind", sa.String, primary_key=True),
    sa.Column("args_key", sa.String, primary_key=True),
    sa.Column("job_id", sa.String, nullable=False),
    sa.Column("result", sa.String, nullable=True),
    sa.Column("at", sa.String, nullable=False),
)

# Load balancers (CONTRACT.md § B): the definition is the source of truth, a node applies it.
# `revision` grows at every accepted mutation; `applied_revision` is what the node last reported.
load_balancers = sa.Table(
    "load_balancers",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("org_id", sa.String, sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("port", sa.Integer, nullable=False),
    sa.Column("tls", sa.Boolean, nullable=False),
    sa.Column("hostname", sa.String, nullable=True),
    sa.Column("node_server_id", sa.String, sa.ForeignKey("servers.id", ondelete="CASCADE"), nullable=False),
    sa.Column("engine", sa.String, nullable=False),
    sa.Column("algorithm", sa.String, nullable=False),
    sa.Column("health_check", sa.String, nullable=False),  # JSON of LbHealthCheck
    sa.Column("state", sa.String, nullable=False),
    sa.Column("state_error", sa.String, nullable=True),
    sa.Column("revision", sa.Integer, nullable=False),
    sa.Column("applied_revision", sa.Integer, nullable=True),
    sa.Column("applied_at", sa.String, nullable=True),
    sa.Column("created_at", sa.String, nullable=False),
    sa.Column("updated_at", sa.String, nullable=False),
    sa.Column("listen_port", sa.Integer, nullable=True),  # the port its node really listens on, as reported
    sa.UniqueConstraint("org_id", "name"),
)

# A backend of a load balancer, with what its node last reported of it (health NULL: never checked).
lb_backends = sa.Table(
    "lb_backends",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("lb_id", sa.String, sa.ForeignKey("load_balancers.id", ondelete="CASCADE"), nullable=False),
    sa.Column("server_id", sa.String, sa.ForeignKey("servers.id", ondelete="CASCADE"), nullable=False),
    sa.Column("port", sa.Integer, nullable=False),
    sa.Column("weight", sa.Integer, nullable=False),
    sa.Column("drained", sa.Boolean, nullable=False),
    sa.Column("health", sa.String, nullable=True),
    sa.Column("last_check_at", sa.String, nullable=True),
    sa.Column("stats", sa.String, nullable=True),  # JSON of BackendStats; NULL on the nginx engine
    sa.Column("created_at", sa.String, nullable=False),
    sa.Column("runtime", sa.String, nullable=True),  # JSON of BackendRuntime, as reported; NULL: not yet
    sa.Index("ix_lb_backends_lb", "lb_id"),
)
