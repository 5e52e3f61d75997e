"""The dialogs of the file browser (issue 4, point 12), each a self-contained modal screen that
returns its result through `dismiss`: properties, permissions, new file from a template, a name,
confirmations and delete, search, the trash, transfers, archives, copy and move (and their taken
names), and the progress of bulk actions. The yes/no confirmation is every area's:
`tui.widgets.dialogs.ConfirmDialog`."""

from __future__ import annotations

from tui.files.dialogs.archive import ArchiveDialog
from tui.files.dialogs.bulk import BulkDialog
from tui.files.dialogs.conflict import ConflictDialog, ConflictPlan, resolve_conflicts
from tui.files.dialogs.copy import CopyDialog
from tui.files.dialogs.new_file import TEMPLATES, NewFileDialog
from tui.files.dialogs.permissions import PermissionsDialog
from tui.files.dialogs.properties import PropertiesDialog
from tui.files.dialogs.search import SearchDialog
from tui.files.dialogs.simple import DeleteDialog, NameDialog
from tui.files.dialogs.transfer import LocalPathDialog, TransferDialog
from tui.files.dialogs.trash import TrashDialog

__all__ = [
    "TEMPLATES",
    "ArchiveDialog",
    "BulkDialog",
    "ConflictDialog",
    "ConflictPlan",
    "CopyDialog",
    "DeleteDialog",
    "LocalPathDialog",
    "NameDialog",
    "NewFileDialog",
    "PermissionsDialog",
    "PropertiesDialog",
    "SearchDialog",
    "TransferDialog",
    "TrashDialog",
    "resolve_conflicts",
]
