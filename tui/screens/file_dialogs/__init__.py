"""The dialogs of the file browser (issue 4, point 12), each a self-contained modal screen that
returns its result through `dismiss`: properties, permissions, new file from a template, a name,
confirmations and delete, search, the trash, transfers, archives, copy and move."""

from __future__ import annotations

from .archive import ArchiveDialog
from .copy import CopyDialog
from .new_file import TEMPLATES, NewFileDialog
from .permissions import PermissionsDialog
from .properties import PropertiesDialog
from .search import SearchDialog
from .simple import ConfirmDialog, DeleteDialog, NameDialog
from .transfer import LocalPathDialog, TransferDialog
from .trash import TrashDialog

__all__ = [
    "TEMPLATES",
    "ArchiveDialog",
    "ConfirmDialog",
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
]
