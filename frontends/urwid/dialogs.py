"""Dialogs over the console: permission requests, questions, the quit question, the config file picker,
the plugins' actions and an action's parameters.

A dialog is drawn on its own background, the styled text in it included (`on_background`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import urwid
from deck.frontend import action_usage, default_option
from deck.tty import printable

from .common import Binding, Clickable, LineBox, Text, on_background, run_binding
from .conversation import tool_widgets
from .i18n import Strings
from .paths import relative_tool

if TYPE_CHECKING:
    from urwid.widget import AbstractFlowWidget


DIALOG = on_background("dialog")


def _box(body: urwid.Widget, title: str) -> urwid.Widget:
    return urwid.AttrMap(LineBox(body, title=title, title_align="left", title_attr="dialog title"), DIALOG)


#: The width of a confirmation or a choice in the middle of the screen.
DIALOG_WIDTH = 64


def asker(titles: dict[str, str], request: dict[str, Any]) -> str:
    """Who asks: the agent's title, and a subagent's name after it (`agent › child`, `subagent`
    being the name the inbox gives it, else its session)."""
    name = str(request.get("agent", ""))
    agent = titles.get(name, name)
    child = request.get("subagent") or request.get("session")
    return f"{agent} › {child}" if child else agent

class AskDialog(urwid.WidgetWrap):
    """What the dialogs of asks (permission requests, questions) share: a list of lines in a box,
    as tall as they are (`natural_rows`), so the dialog takes no more of the screen than it needs."""

    walker: urwid.SimpleFocusListWalker

    def natural_rows(self, cols: int) -> int:
        """The rows the whole dialog takes at `cols` columns, borders included."""
        return 2 + sum(widget.rows((max(1, cols - 2),)) for widget in self.walker)


class Scrolled(urwid.Widget):
    """Lines (flow widgets) in a box of whatever height it is given: as many as fit from `top`, and
    when they do not all fit, a last line saying which are shown; PgUp PgDn and the wheel scroll."""

    _sizing = frozenset([urwid.Sizing.BOX])

    def __init__(self, widgets: list[AbstractFlowWidget], strings: Strings) -> None:
        super().__init__()
        self.pile = urwid.Pile(widgets)
        self.strings = strings
        self.top = 0
        self.shown = 1  # the lines shown at the last render, a page

    def natural_rows(self, cols: int) -> int:
        return self.pile.rows((cols,))

    def render(self, size: Any, focus: bool = False) -> urwid.Canvas:
        cols, rows = size
        total = self.natural_rows(cols)
        canvas = urwid.CompositeCanvas(self.pile.render((cols,)))
        if total <= rows:
            self.top = 0
            canvas.pad_trim_top_bottom(0, rows - total)
            return canvas
        self.shown = max(0, rows - 1)
        self.top = max(0, min(self.top, total - self.shown))
        canvas.pad_trim_top_bottom(-self.top, self.top + self.shown - total)
        last = min(total, self.top + self.shown)
        s = self.strings
        where = s("scroll_lines", first=self.top + 1, last=last, n=total) if self.shown else s("scroll_none", n=total)
        more = Text(("dim", where), wrap="ellipsis").render((cols,))
        return urwid.CanvasCombine([(canvas, None, False), (more, None, False)]) if self.shown else more

    def scroll(self, pages: int) -> None:
        """Up (`pages` < 0) or down by pages of the lines shown last."""
        self.top = max(0, self.top + pages * max(1, self.shown - 1))
        self._invalidate()

    def mouse_event(self, size: Any, event: str, button: int, col: int, row: int, focus: bool) -> bool:
        if event == "mouse press" and button in (4, 5):
            self.top = max(0, self.top + (3 if button == 5 else -3))
            self._invalidate()
            return True
        return False


class PermissionDialog(AskDialog):
    """One pending request of `requests` (every agent's), with its tool call, diff and options.

    The tool call's title and the options always show; its details (input, diff) take the rows
    left between them and scroll (PgUp PgDn); its paths beneath the agent's `folder` are relative
    to it. The options are in the agent's order, numbered: 1-9 answers with that option, Enter the
    focused one (at first the one that allows once), `a` the one that always allows; Tab goes to
    the next request; Esc closes (PERMISSION_KEYS)."""

    def __init__(
        self,
        strings: Strings,
        requests: list[dict[str, Any]],
        index: int,
        titles: dict[str, str],
        on_answer: Callable[[str, str], None],
        on_close: Callable[[], None],
        on_move: Callable[[int], None],
        folder: str = "",
    ) -> None:
        self.strings = strings
        self.request = requests[index]
        self.count = len(requests)
        self.index = index
        self.on_answer = on_answer
        self.on_close = on_close
        self.on_move = on_move
        request = self.request
        agent = asker(titles, request)
        self.options = [o for o in request.get("options") or [] if "optionId" in o]
        self.always = next((o for o in self.options if o.get("kind") == "allow_always"), None)
        self.position = Text("")
        self.set_position(index, len(requests))
        tool = tool_widgets(relative_tool(request.get("toolCall") or {}, folder), strings, True, None)
        head: list[AbstractFlowWidget] = tool[:1]
        if request.get("rejections"):
            head.append(Text(("warning", strings("rejections", n=request["rejections"]))))
        self.details = Scrolled(tool[1:], strings) if tool[1:] else None
        self.buttons = [self._button(number, option) for number, option in enumerate(self.options, 1)]
        self.choices = urwid.Pile(self.buttons or [Text("")])
        if self.buttons:
            self.choices.focus_position = default_option(self.options)
        # Compact: the tool call, its details, its options, one line of position and keys.
        tail: list[AbstractFlowWidget] = [urwid.Divider(), self.choices, self.position]
        self.fixed = [*head, *tail]
        middle: list[Any] = [("weight", 1, self.details)] if self.details else []
        self.pile = urwid.Pile([*(("pack", w) for w in head), *middle, *(("pack", w) for w in tail)])
        self.pile.focus_position = len(head) + len(middle) + 1  # the options
        super().__init__(_box(self.pile, strings("permission_title", agent=agent)))

    def _button(self, number: int, option: dict[str, Any]) -> Clickable:
        attr = "error" if str(option.get("kind", "")).startswith("reject") else "ok"
        label = [("strong", f"{number} "), (attr, str(option.get("name") or option["optionId"]))]
        return Clickable(label, partial(self.answer, option), focusable=True)

    def natural_rows(self, cols: int) -> int:
        inner = max(1, cols - 2)
        details = self.details.natural_rows(inner) if self.details else 0
        return 2 + details + sum(widget.rows((inner,)) for widget in self.fixed)

    def set_position(self, index: int, count: int) -> None:
        """This request is the `index`th of `count` pending asks (they come and go while it is open)."""
        self.index, self.count = index, count
        s = self.strings
        keys = s("permission_keys_always") if self.always else s("permission_keys")
        self.position.set_text(("dim", f"{s('permission_count', i=index + 1, n=count)} · {keys}"))

    def answer(self, option: dict[str, Any]) -> None:
        self.on_answer(str(self.request["id"]), str(option["optionId"]))

    def answer_always(self) -> None:
        if self.always is not None:
            self.answer(self.always)

    def scroll_details(self, key: str) -> None:
        if self.details is not None:
            self.details.scroll(-1 if key == "page up" else 1)

    def keypress(self, size: Any, key: str) -> str | None:
        if not run_binding(PERMISSION_KEYS, self, key):
            super().keypress(size, key)
        return None  # a modal dialog: nothing leaks to the screen behind


#: The keys of a permission request's dialog, for its handling and the help (F1).
PERMISSION_KEYS: list[Binding[PermissionDialog]] = [
    Binding(tuple("123456789"), "key_pick", lambda d, key: d.answer(d.options[int(key) - 1]),
            lambda d, key: int(key) <= len(d.options)),
    Binding(("enter",), "key_focused_option"),  # the focused option's button
    Binding(("a",), "key_always", lambda d, key: d.answer_always(), lambda d, key: d.always is not None),
    Binding(("page up", "page down"), "key_details", lambda d, key: d.scroll_details(key), lambda d, key: d.details is not None),
    Binding(("tab", "right"), "key_next_request", lambda d, key: d.on_move(1), lambda d, key: d.count > 1),
    Binding(("shift tab", "left"), "key_previous_request", lambda d, key: d.on_move(-1), lambda d, key: d.count > 1),
    Binding(("esc",), "key_later", lambda d, key: d.on_close()),
]  # fmt: skip


TRUE_WORDS = {"y", "yes", "true", "1", "on", "o", "oui", "vrai"}
FALSE_WORDS = {"n", "no", "false", "0", "off", "non", "faux"}


class QuestionDialog(AskDialog):
    """One pending question of `asks` (an ACP elicitation form): its message and one field per
    property of its schema, each answer converted to the property's type.

    Enter goes to the next field and submits on the last one; Ctrl-S submits, Ctrl-D declines,
    Tab goes to the next request, Esc puts the question off (it waits behind F4) (QUESTION_KEYS).
    It opens at its top: the message and the first field's label in view, its field focused."""

    def __init__(
        self,
        strings: Strings,
        asks: list[dict[str, Any]],
        index: int,
        titles: dict[str, str],
        on_answer: Callable[[str, dict[str, Any] | None], None],
        on_close: Callable[[], None],
        on_move: Callable[[int], None],
    ) -> None:
        self.strings = strings
        self.request = asks[index]
        self.on_answer = on_answer
        self.on_close = on_close
        self.on_move = on_move
        question = self.request
        agent = asker(titles, question)
        schema: dict[str, Any] = question["schema"] if isinstance(question.get("schema"), dict) else {}
        properties: dict[str, Any] = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
        self.required = {str(name) for name in schema.get("required") or []}
        self.position = Text("")
        self.set_position(index, len(asks))
        message = Text(str(question.get("message") or ""))
        items: list[AbstractFlowWidget] = [self.position, urwid.Divider(), message, urwid.Divider()]
        #: (name, property, edit field, its position in the list)
        self.fields: list[tuple[str, dict[str, Any], urwid.Edit, int]] = []
        for name, prop in properties.items():
            prop = prop if isinstance(prop, dict) else {}
            label: list[Any] = [("strong", str(prop.get("title") or name))]
            if name in self.required:
                label.append(("error", " *"))
            hint = self._hint(prop)
            if hint:
                label.append(("dim", f"  ({hint})"))
            items.append(Text(label))
            if prop.get("description"):
                items.append(Text(("dim", str(prop["description"]))))
            edit = urwid.Edit("› ", printable(self._default(prop)))  # an Edit is no Text: shown as it will be sent
            self.fields.append((str(name), prop, edit, len(items)))
            items += [urwid.AttrMap(edit, "field", "field focus"), urwid.Divider()]
        if self.required:
            items.append(Text([("error", "* "), ("dim", strings("question_required_mark"))]))
        self.error = Text("")
        submit = Clickable(("button", f" {strings('question_submit')} "), self.submit, focusable=True)
        decline = Clickable(("button", f" {strings('question_decline')} "), self.decline, focusable=True)
        items += [self.error, submit, decline, urwid.Divider(), Text(("dim", strings("question_keys")))]
        self.walker = urwid.SimpleFocusListWalker(items)
        self.listbox = TopFirst(self.walker)
        self.walker.set_focus(self.fields[0][3] if self.fields else items.index(submit))
        super().__init__(_box(self.listbox, strings("question_title", agent=agent)))

    def set_position(self, index: int, count: int) -> None:
        """This question is the `index`th of `count` pending asks (they come and go while it is open)."""
        self.index, self.count = index, count
        self.position.set_text(("dim", self.strings("permission_count", i=index + 1, n=count)))

    def _hint(self, prop: dict[str, Any]) -> str:
        if isinstance(prop.get("enum"), list) and prop["enum"]:
            return self.strings("question_choices", choices=", ".join(str(c) for c in prop["enum"]))
        kind = str(prop.get("type") or "string")
        return self.strings(f"question_type_{kind}") if kind in ("number", "integer", "boolean", "array") else ""

    def _default(self, prop: dict[str, Any]) -> str:
        default = prop.get("default")
        if default is None:
            return ""
        if isinstance(default, bool):
            return self.strings("question_yes" if default else "question_no")
        return str(default)

    def values(self) -> dict[str, Any]:
        """The answers typed by their property's type; empty optional fields are left out.

        Raises ValueError with the message to show, after focusing the field at fault."""
        out: dict[str, Any] = {}
        for name, prop, edit, position in self.fields:
            text = edit.edit_text.strip()
            label = str(prop.get("title") or name)
            try:
                if not text:
                    if name in self.required:
                        raise ValueError(self.strings("question_missing", field=label))
                    continue
                out[name] = self._convert(label, prop, text if prop.get("type") not in (None, "string") else edit.edit_text)
            except ValueError:
                self.walker.set_focus(position)
                raise
        return out

    def _convert(self, label: str, prop: dict[str, Any], text: str) -> Any:
        s = self.strings
        kind = str(prop.get("type") or "string")
        value: Any = text
        if kind == "boolean":
            word = text.lower()
            if word not in TRUE_WORDS | FALSE_WORDS:
                raise ValueError(s("question_bad_boolean", field=label))
            value = word in TRUE_WORDS
        elif kind == "integer":
            try:
                value = int(text)
            except ValueError:
                raise ValueError(s("question_bad_integer", field=label)) from None
        elif kind == "array":  # a list of strings, typed a, b, c
            value = [item.strip() for item in text.split(",") if item.strip()]
            items = prop.get("items")
            choices = items.get("enum") if isinstance(items, dict) else None
            if isinstance(choices, list) and choices and any(item not in choices for item in value):
                raise ValueError(s("question_choices_error", field=label, choices=", ".join(str(c) for c in choices)))
            return value
        elif kind == "number":
            try:
                value = int(text)
            except ValueError:
                try:
                    value = float(text)
                except ValueError:
                    raise ValueError(s("question_bad_number", field=label)) from None
                if not math.isfinite(value):
                    raise ValueError(s("question_bad_number", field=label))
        choices = prop.get("enum")
        if isinstance(choices, list) and choices and value not in choices:
            raise ValueError(s("question_choices_error", field=label, choices=", ".join(str(c) for c in choices)))
        return value

    def submit(self) -> None:
        try:
            values = self.values()
        except ValueError as exc:
            self.error.set_text(("error", str(exc)))
            return
        self.error.set_text("")
        self.on_answer(str(self.request["id"]), values)

    def decline(self) -> None:
        self.on_answer(str(self.request["id"]), None)

    def _field_index(self) -> int | None:
        focus = self.walker.focus
        for i, field in enumerate(self.fields):
            if field[3] == focus:
                return i
        return None

    def next_field(self) -> None:
        """Enter in a field: the next one, or on the last, submit."""
        current = self._field_index()
        if current is not None and current + 1 < len(self.fields):
            self.walker.set_focus(self.fields[current + 1][3])
        else:
            self.submit()

    def keypress(self, size: Any, key: str) -> str | None:
        if not run_binding(QUESTION_KEYS, self, key):
            super().keypress(size, key)
        return None  # a modal dialog: nothing leaks to the screen behind


#: The keys of a question's dialog, for its handling and the help (F1).
QUESTION_KEYS: list[Binding[QuestionDialog]] = [
    Binding(("enter",), "key_next_field", lambda d, key: d.next_field(), lambda d, key: d._field_index() is not None),
    Binding(("ctrl s",), "key_submit", lambda d, key: d.submit()),
    Binding(("ctrl d",), "key_decline", lambda d, key: d.decline()),
    Binding(("tab",), "key_next_request", lambda d, key: d.on_move(1), lambda d, key: d.count > 1),
    Binding(("shift tab",), "key_previous_request", lambda d, key: d.on_move(-1), lambda d, key: d.count > 1),
    Binding(("esc",), "key_later", lambda d, key: d.on_close()),
]


class TopFirst(urwid.ListBox):
    """A ListBox that opens at its top: at its first render the lines above its focus show too, as
    many as fit with the focus in view (urwid would put the focus on the first row)."""

    def __init__(self, walker: urwid.SimpleFocusListWalker[AbstractFlowWidget]) -> None:
        super().__init__(walker)
        self.walker = walker
        self.opening = True

    def render(self, size: Any, focus: bool = False) -> Any:
        if self.opening and len(size) == 2:
            self.opening = False
            cols, rows = size
            position = self.focus_position
            above = sum(widget.rows((cols,)) for widget in self.walker[:position])
            height = self.walker[position].rows((cols,), True)
            self.change_focus(size, position, offset_inset=max(0, min(above, rows - height)))
        return super().render(size, focus)


class HelpDialog(urwid.WidgetWrap):
    """The keys (F1): `sections` of (heading, [(keys, what they do)]), as the tables the handling
    reads give them; PgUp PgDn and the arrows scroll, Esc or F1 closes."""

    KEYS_WIDTH = 16

    def __init__(self, title: str, sections: list[tuple[str, list[tuple[str, str]]]], on_close: Callable[[], None]) -> None:
        self.on_close = on_close
        widest = max((len(keys) for _heading, rows in sections for keys, _does in rows), default=0)
        width = min(widest, self.KEYS_WIDTH) + 2
        items: list[AbstractFlowWidget] = []
        for heading, rows in sections:
            items += [urwid.Divider()] if items else []
            items.append(Text(("heading", heading)))
            for keys, does in rows:
                items.append(urwid.Columns([(width, Text(("strong", keys))), Text(does)]))
        self.listbox = urwid.ListBox(urwid.SimpleFocusListWalker(items))
        super().__init__(_box(self.listbox, title))

    def keypress(self, size: Any, key: str) -> str | None:
        if key in ("esc", "f1"):
            self.on_close()
        else:
            super().keypress(size, key)
        return None


class ChoiceDialog(urwid.WidgetWrap):
    """A question with a few answers `(key, label, value)`, as tall as its text and answers: a key
    picks its answer, Enter the focused one (`default`'s at first, else the first); Esc, unless it
    is a choice's key, answers ""."""

    def __init__(
        self,
        title: str,
        text: str,
        choices: list[tuple[str, str, str]],
        on_answer: Callable[[str], None],
        default: str | None = None,
    ) -> None:
        self.on_answer = on_answer
        self.keys = {key: value for key, _label, value in choices}
        buttons = [Clickable(label, partial(on_answer, value), focusable=True) for _key, label, value in choices]
        pile = urwid.Pile([Text(text), urwid.Divider(), *buttons])
        values = [value for _key, _label, value in choices]
        pile.focus_position = 2 + (values.index(default) if default in values else 0)
        super().__init__(_box(pile, title))

    def keypress(self, size: Any, key: str) -> str | None:
        if key in self.keys:
            self.on_answer(self.keys[key])
        elif key == "esc":
            self.on_answer("")
        else:
            super().keypress(size, key)
        return None


class ConfirmDialog(ChoiceDialog):
    """A yes/no question, yes first and no focused (Enter says no): y (or o in French) says yes; n or
    Esc says no."""

    def __init__(self, strings: Strings, title: str, text: str, on_answer: Callable[[bool], None],
                 yes: str = "yes") -> None:  # fmt: skip
        choices = [("y", strings(yes), "yes"), ("n", strings("no"), "")]
        super().__init__(title, text, choices, lambda value: on_answer(bool(value)), default="")
        self.keys.update({"Y": "yes", "o": "yes", "O": "yes", "N": ""})


class ActionsMenu(urwid.WidgetWrap):
    """What the plugins offer to do (`DeckService.Actions()`, in the snapshot), each as line mode
    types it (`/history [AGENT]`) and what it does, as the plugin words it; the console has no
    code of any of them. 1-9 (or Enter on one, or a click) picks one, Esc closes (ACTIONS_KEYS)."""

    def __init__(
        self,
        strings: Strings,
        actions: list[dict[str, Any]],
        on_pick: Callable[[dict[str, Any]], None],
        on_close: Callable[[], None],
    ) -> None:
        self.actions = actions
        self.on_pick = on_pick
        self.on_close = on_close
        items: list[AbstractFlowWidget] = []
        for number, action in enumerate(actions, 1):
            key = str(number) if number < 10 else ""
            help_text = " · ".join(filter(None, (str(action.get("help") or ""), str(action.get("source") or ""))))
            items.append(Clickable(("strong", f"{key:<3}{action_usage(action)}"), partial(on_pick, action), focusable=True))
            items.append(urwid.Padding(Text(("dim", help_text)), left=3))
        if not items:
            items.append(Text(("dim", strings("actions_none"))))
        self.walker: urwid.SimpleFocusListWalker[AbstractFlowWidget] = urwid.SimpleFocusListWalker(items)
        super().__init__(_box(urwid.ListBox(self.walker), strings("actions_title")))

    def pick(self, number: int) -> None:
        if 1 <= number <= len(self.actions):
            self.on_pick(self.actions[number - 1])

    def keypress(self, size: Any, key: str) -> str | None:
        if not run_binding(ACTIONS_KEYS, self, key):
            super().keypress(size, key)
        return None  # a modal dialog: nothing leaks to the screen behind


#: The keys of the actions menu, for its handling and the help (F1).
ACTIONS_KEYS: list[Binding[ActionsMenu]] = [
    Binding(tuple("123456789"), "key_action_pick", lambda d, key: d.pick(int(key))),
    Binding(("enter",), "key_action_focused"),  # the focused action's line
    Binding(("esc",), "key_close", lambda d, key: d.on_close()),
]


class ActionForm(urwid.WidgetWrap):
    """The parameters of one action, a field each in the order line mode types them: its name (`*`
    when it is required), what it is as the plugin words it, and the field, an agent's at first the
    agent given (the selected one). Enter goes to the next field and runs the action on the last;
    Esc goes back (ACTION_FORM_KEYS). A required field left empty is said, and nothing runs."""

    def __init__(
        self,
        strings: Strings,
        action: dict[str, Any],
        agent: str,
        on_run: Callable[[dict[str, str]], None],
        on_close: Callable[[], None],
    ) -> None:
        self.strings = strings
        self.action = action
        self.on_run = on_run
        self.on_close = on_close
        items: list[AbstractFlowWidget] = []
        if action.get("help"):
            items += [Text(str(action["help"])), urwid.Divider()]
        #: (parameter, its field, its position in the pile)
        self.fields: list[tuple[dict[str, Any], urwid.Edit, int]] = []
        for param in action.get("params") or []:
            label: list[Any] = [("strong", str(param.get("metavar") or param["name"]))]
            if param.get("required"):
                label.append(("error", " *"))
            if param.get("help"):
                label.append(("dim", f"  {param['help']}"))
            items.append(Text(label))
            edit = urwid.Edit("› ", agent if param.get("agent") else "")
            self.fields.append((param, edit, len(items)))
            items.append(urwid.AttrMap(edit, "field", "field focus"))
        self.error = Text("")
        run = Clickable(("button", f" {strings('action_run')} "), self.submit, focusable=True)
        items += [urwid.Divider(), self.error, run, Text(("dim", strings("action_keys")))]
        self.pile = urwid.Pile(items)
        self.pile.focus_position = self.fields[0][2] if self.fields else items.index(run)
        super().__init__(_box(self.pile, printable(action_usage(action))))

    def values(self) -> dict[str, str]:
        """What was typed, by parameter, in the parameters' order; an empty optional field is left out.

        Raises ValueError with the message to show, after focusing the field at fault."""
        out: dict[str, str] = {}
        for param, edit, position in self.fields:
            text = edit.edit_text.strip()
            if not text:
                if param.get("required"):
                    self.pile.focus_position = position
                    raise ValueError(self.strings("question_missing", field=param.get("metavar") or param["name"]))
                continue
            out[str(param["name"])] = text
        return out

    def submit(self) -> None:
        try:
            values = self.values()
        except ValueError as exc:
            self.error.set_text(("error", str(exc)))
            return
        self.error.set_text("")
        self.on_run(values)

    def _field_index(self) -> int | None:
        focus = self.pile.focus_position
        return next((i for i, (_param, _edit, position) in enumerate(self.fields) if position == focus), None)

    def next_field(self) -> None:
        """Enter in a field: the next one, or on the last, run the action."""
        current = self._field_index()
        if current is not None and current + 1 < len(self.fields):
            self.pile.focus_position = self.fields[current + 1][2]
        else:
            self.submit()

    def keypress(self, size: Any, key: str) -> str | None:
        if not run_binding(ACTION_FORM_KEYS, self, key):
            super().keypress(size, key)
        return None  # a modal dialog: nothing leaks to the screen behind


#: The keys of an action's parameters, for their handling and the help (F1).
ACTION_FORM_KEYS: list[Binding[ActionForm]] = [
    Binding(("enter",), "key_next_field_run", lambda d, key: d.next_field(), lambda d, key: d._field_index() is not None),
    Binding(("ctrl s",), "key_action_run", lambda d, key: d.submit()),
    Binding(("esc",), "key_action_back", lambda d, key: d.on_close()),
]


class FilePicker(urwid.WidgetWrap):
    """Browse directories and pick a file; `on_done(path)` with "" when cancelled."""

    def __init__(self, strings: Strings, start: Path, on_done: Callable[[str], None]) -> None:
        self.strings = strings
        self.on_done = on_done
        self.edit = urwid.Edit(("dim", strings("picker_path")))
        self.walker: urwid.SimpleFocusListWalker[AbstractFlowWidget] = urwid.SimpleFocusListWalker([])
        self.listbox = urwid.ListBox(self.walker)
        self.pile = urwid.Pile([("pack", self.edit), ("pack", urwid.Divider("─")), self.listbox])
        self.directory = start
        self.chdir(start)
        super().__init__(_box(self.pile, strings("picker_title")))

    def chdir(self, directory: Path) -> None:
        self.directory = directory.resolve()
        self.edit.set_edit_text(printable(str(self.directory)) + "/")  # an Edit is no Text: made printable here
        self.edit.set_edit_pos(len(self.edit.edit_text))
        try:
            entries = sorted(self.directory.iterdir(), key=lambda p: (not p.is_dir(), p.suffix != ".toml", p.name.lower()))
        except OSError:
            entries = []
        items: list[AbstractFlowWidget] = [Clickable("../", lambda: self.chdir(self.directory.parent), focusable=True)]
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                items.append(Clickable(("strong", entry.name + "/"), partial(self.chdir, entry), focusable=True))
            else:
                attr = "text" if entry.suffix == ".toml" else "dim"
                items.append(Clickable((attr, entry.name), partial(self.on_done, str(entry)), focusable=True))
        self.walker[:] = items
        self.pile.focus_position = 2

    def keypress(self, size: Any, key: str) -> str | None:
        if key == "esc":
            self.on_done("")
            return None
        if key == "backspace" and self.pile.focus_position == 2:
            self.chdir(self.directory.parent)
            return None
        if key == "enter" and self.pile.focus_position == 0:
            path = Path(self.edit.edit_text).expanduser()
            if path.is_dir():
                self.chdir(path)
            elif path.name:
                self.on_done(str(path))
            return None
        if key == "tab":
            self.pile.focus_position = 0 if self.pile.focus_position == 2 else 2
            return None
        if self.pile.focus_position == 2 and len(key) == 1 and key.isprintable() and key != " ":
            self.pile.focus_position = 0  # typing while browsing writes the path (space still opens an entry)
        super().keypress(size, key)
        return None


#: Area: `area(cols, rows)` says where the conversation is on a screen of that size: (its first
#: column, its width, its rows).
Area = Callable[[int, int], tuple[int, int, int]]
#: A conversation narrower than that leaves no room for a dialog: it goes over the whole width.
NARROWEST = 30


def conversation_box(area: Area, cols: int, rows: int) -> tuple[int, int, int]:
    """Where a dialog may go: the conversation's place (the whole width when it is too narrow)."""
    left, width, body = area(cols, rows)
    if width < NARROWEST:
        left, width = 0, cols
    return left, width, max(1, min(body, rows))


class InConversation(urwid.Overlay):
    """A dialog in the conversation's place, the agents panel and the input still in view: over the
    whole of it (`width` 0: a list, the history or the file picker), or centred in it, no wider than
    `width` and as tall as its content."""

    def __init__(self, dialog: urwid.Widget, under: urwid.Widget, area: Area, width: int = 0) -> None:
        self.area = area
        self.most = width
        super().__init__(dialog, under, "left", ("relative", 100), "top", ("relative", 100))

    def calculate_padding_filler(self, size: tuple[int, int], focus: bool) -> tuple[int, int, int, int]:
        cols, rows = size
        left, width, body = conversation_box(self.area, cols, rows)
        top, height = 0, body
        if self.most:
            inner = min(width, self.most)
            left += (width - inner) // 2
            width = inner
            height = max(1, min(self.top_w.rows((width,)), body))
            top = (body - height) // 2
        return left, max(0, cols - left - width), top, max(0, rows - top - height)


class Lowered(urwid.WidgetWrap):
    """A box widget drawn in the rows below its first `top` ones, left blank for a dialog over them:
    a list that follows its end then shows its last lines below the dialog, a short one its first."""

    def __init__(self, widget: urwid.Widget) -> None:
        self.top = 0
        super().__init__(widget)

    def lower(self, top: int) -> None:
        if top != self.top:
            self.top = top
            self._invalidate()

    def _inner(self, size: Any) -> tuple[tuple[int, int], int]:
        cols, rows = size
        top = min(self.top, rows - 1)
        return (cols, rows - top), top

    def render(self, size: Any, focus: bool = False) -> urwid.Canvas:
        inner, top = self._inner(size)
        canvas = urwid.CompositeCanvas(self._w.render(inner, focus))
        canvas.pad_trim_top_bottom(top, 0)
        return canvas

    def keypress(self, size: Any, key: str) -> str | None:
        return self._w.keypress(self._inner(size)[0], key)

    def mouse_event(self, size: Any, event: str, button: int, col: int, row: int, focus: bool) -> bool:
        inner, top = self._inner(size)
        return row >= top and bool(self._w.mouse_event(inner, event, button, col, row - top, focus))


class OverConversation(urwid.Overlay):
    """An ask's dialog over the top of the conversation, no taller than it needs: the agents panel
    stays in view beside it, and below it the conversation (`lowered` into the rows left: the
    prompt and the tool call that led to the ask) and the input.

    `area(cols, rows)` says where the conversation is: (its first column, its width, its rows)."""

    #: Rows of the conversation kept in view below the dialog, at least.
    CONTEXT = 6
    MAX_WIDTH = 100

    def __init__(self, dialog: AskDialog, under: urwid.Widget, area: Area, lowered: Lowered) -> None:
        self.area = area
        self.lowered = lowered
        super().__init__(dialog, under, "left", ("relative", 100), "top", ("relative", 100))

    def calculate_padding_filler(self, size: tuple[int, int], focus: bool) -> tuple[int, int, int, int]:
        cols, rows = size
        left, width, body = conversation_box(self.area, cols, rows)
        width = min(width, self.MAX_WIDTH)
        room = max(8, body - max(self.CONTEXT, body // 3))
        height = max(1, min(self.top_w.natural_rows(width), room, rows))
        return left, max(0, cols - left - width), 0, rows - height

    def render(self, size: Any, focus: bool = False) -> urwid.CompositeCanvas:
        _left, _right, top, bottom = self.calculate_padding_filler(size, focus)
        self.lowered.lower(size[1] - top - bottom)
        return super().render(size, focus)
