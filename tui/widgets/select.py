"""`FormSelect`: a dropdown in a form where Enter means "go" (create, run, save).

Textual's `Select` opens its list on Enter; in a form whose hint says "Enter: create", a closed
dropdown must submit the form like a text field does. Space, the arrows and a click still open the
list, and Enter in the open list picks an option (the list has the focus then, not the select).
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Select

T = TypeVar("T")


class FormSelect(Select[T]):
    """A `Select` whose Enter posts `FormSelect.Submitted` (handle it where Input.Submitted is)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "submit", "Submit", show=False),
    ]

    class Submitted(Message):
        """Enter on the closed dropdown: the form's own Enter action should run."""

        def __init__(self, select: FormSelect[Any]) -> None:
            super().__init__()
            self.select = select

        @property
        def control(self) -> FormSelect[Any]:
            return self.select

    def action_submit(self) -> None:
        if self.expanded:  # the open list has its own Enter (pick); never submit from under it
            return
        self.post_message(self.Submitted(self))
