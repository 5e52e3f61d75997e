"""Open one file dialog in the real TUI, against a running `fleetdeck local` (for trying by hand).

    python -m fleetdeck local --data-dir /tmp/fd-demo &
    PYTHONPATH=. python scripts/try_file_dialog.py /tmp/fd-demo permissions public_html/index.php

The dialog opens over the server list of the demo server, on the `example.com` scope; its
result is shown as a notification when it closes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx

from api_client import Scope, Server
from tui.app import FleetdeckApp
from tui.connection import Connection
from tui.files import dialogs as fd
from tui.widgets.dialogs import ConfirmDialog


def make_dialog(name: str, server: Server, scope: Scope, arg: str) -> Any:
    directory = arg.rpartition("/")[0]
    dialogs = {
        "properties": lambda: fd.PropertiesDialog(server, scope, arg),
        "permissions": lambda: fd.PermissionsDialog(server, scope, [arg], 0o644, has_dirs=True),
        "confirm": lambda: ConfirmDialog("Empty the trash?", "This cannot be undone.", confirm_label="Empty"),
        "delete": lambda: fd.DeleteDialog([arg, "logs", "favicon.ico"]),
        "name": lambda: fd.NameDialog("Rename", arg.rpartition("/")[2], hint="A new name in the same folder."),
    }
    if name == "new_file":
        return fd.NewFileDialog(server, scope, directory)
    if name == "search":
        return fd.SearchDialog(server, scope, arg)
    if name == "trash":
        return fd.TrashDialog(server, scope)
    if name == "download":
        return fd.TransferDialog.download(server, scope, arg, Path("/tmp") / arg.rpartition("/")[2])
    if name == "upload":
        return fd.TransferDialog.upload(server, scope, Path(arg), "uploaded-" + Path(arg).name)
    if name == "compress":
        return fd.ArchiveDialog.compress(server, scope, [arg], directory)
    if name == "extract":
        return fd.ArchiveDialog.extract(server, scope, arg, directory)
    if name == "copy":
        return fd.CopyDialog(
            "copy", [arg], f"local:example.com:/{directory}", "local:shop.example.org:/", "", cross="site"
        )
    if name == "localpath":
        return fd.LocalPathDialog("Save as", arg)
    return dialogs[name]()


class TryApp(FleetdeckApp):
    def __init__(self, connection: Connection, server: Server, dialog: str, arg: str) -> None:
        super().__init__(connection)
        self.server, self.dialog, self.arg = server, dialog, arg

    def on_mount(self) -> None:  # Textual calls FleetdeckApp.on_mount too: open over its server list
        self.set_timer(0.5, self._open)

    def _open(self) -> None:
        scope = Scope(scope="site", domain="example.com")
        self.push_screen(
            make_dialog(self.dialog, self.server, scope, self.arg),
            lambda result: self.notify(f"result: {result!r}", timeout=30),
        )


def main() -> None:
    data_dir, dialog = Path(sys.argv[1]), sys.argv[2]
    arg = sys.argv[3] if len(sys.argv) > 3 else ""
    credentials = json.loads((data_dir / "demo-credentials.json").read_text())
    headers = {"Authorization": f"Bearer {credentials['token']}"}
    body = httpx.get(f"{credentials['base_url']}/v1/servers/{credentials['server_id']}", headers=headers).json()
    connection = Connection(credentials["base_url"], credentials["token"], "try a dialog")
    app = TryApp(connection, Server.model_validate(body), dialog, arg)
    app.run()


if __name__ == "__main__":
    main()
