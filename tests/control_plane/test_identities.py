"""The principals the control plane keeps by token (control_plane.auth.identities) are forgotten
by any write to the identity tables through the engine, on a real SQLite database."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from control_plane.auth import store
from control_plane.auth.identities import identity_cache
from control_plane.auth.principal import Principal
from control_plane.auth.secrets import hash_token
from control_plane.servers import store as servers
from control_plane.state import kept_servers
from control_plane.storage import Database


@pytest.fixture
def database(tmp_path: Path) -> Database:
    db = Database(f"sqlite:///{tmp_path / 'identities.db'}")
    db.migrate()
    return db


def _owner_session(db: Database) -> tuple[str, str, Principal]:
    """(session token, org id, its principal) of a new owner."""
    org = db.run_sync(store.create_org, "acme", "max")
    user = db.run_sync(store.create_user, "owner@acme.test", "Owner", "not-a-real-hash")
    db.run_sync(store.add_membership, user["id"], org["id"], "owner")
    token, _ = db.run_sync(store.create_session, user["id"], org["id"], timedelta(hours=1))
    row = db.run_sync(store.identity_for_token, token)
    assert row is not None
    principal = Principal.model_validate({**row, "capabilities": frozenset()})
    return token, org["id"], principal


def test_a_write_to_an_identity_table_forgets_what_was_kept(database: Database) -> None:
    identities = identity_cache()
    identities.watch(database.engine)
    token, org_id, principal = _owner_session(database)
    identities.keep(hash_token(token), (principal, None), identities.generation)
    assert identities.get(hash_token(token)) == (principal, None)
    database.run_sync(store.set_org_plan, org_id, "plus")
    assert identities.get(hash_token(token)) is None


def test_a_principal_read_before_a_write_is_not_kept(database: Database) -> None:
    identities = identity_cache()
    identities.watch(database.engine)
    token, org_id, principal = _owner_session(database)
    generation = identities.generation  # as authenticate reads it, before its lookup
    database.run_sync(store.set_org_plan, org_id, "plus")  # a write lands during the lookup
    identities.keep(hash_token(token), (principal, None), generation)
    assert identities.get(hash_token(token)) is None


def test_a_write_to_another_table_keeps_what_was_kept(database: Database) -> None:
    identities = identity_cache()
    identities.watch(database.engine)
    token, org_id, principal = _owner_session(database)
    identities.keep(hash_token(token), (principal, None), identities.generation)
    database.run_sync(store.create_api_token, principal.user_id, org_id, "ci")  # tokens: watched
    assert identities.get(hash_token(token)) is None
    identities.keep(hash_token(token), (principal, None), identities.generation)
    database.run_sync(servers.create_server, org_id, "web-1", "full", None)  # servers: not watched
    assert identities.get(hash_token(token)) == (principal, None)


def test_a_kept_server_row_is_forgotten_when_the_server_is_deleted(database: Database) -> None:
    """`Fleet.servers_kept`, which `server_row` answers from: a delete through the engine."""
    kept = kept_servers()
    kept.watch(database.engine)
    _, org_id, _ = _owner_session(database)
    row, _ = database.run_sync(servers.create_server, org_id, "web-1", "full", None)
    kept.keep((org_id, row["id"]), row, kept.generation)
    assert kept.get((org_id, row["id"])) == row
    database.run_sync(store.set_org_plan, org_id, "plus")  # orgs: not the servers' table
    assert kept.get((org_id, row["id"])) == row
    assert database.run_sync(servers.delete_server, org_id, row["id"])
    assert kept.get((org_id, row["id"])) is None
