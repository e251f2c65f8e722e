"""A small HTML tree from the standard library's parser, for asserting on rendered pages
the way a browser reads them (elements, attributes, text), not with regular expressions."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"meta", "link", "input", "br", "img", "hr", "source", "area", "base", "col", "wbr"}
RAW_TEXT = {"script", "style", "textarea", "title"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str | None]
    children: list[Element | str] = field(default_factory=list)
    parent: Element | None = None

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def iter(self) -> list[Element]:
        found = [self]
        for child in self.children:
            if isinstance(child, Element):
                found += child.iter()
        return found

    def find_all(self, tag: str | None = None, **attrs: str) -> list[Element]:
        return [
            e
            for e in self.iter()
            if (tag is None or e.tag == tag) and all(e.attrs.get(k) == v for k, v in attrs.items())
        ]

    def by_id(self, id: str) -> Element | None:
        found = [e for e in self.iter() if e.attrs.get("id") == id]
        assert len(found) <= 1, f"id {id} is not unique"
        return found[0] if found else None


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.current = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, dict(attrs), parent=self.current)
        self.current.children.append(element)
        if tag not in VOID:
            self.current = element

    def handle_endtag(self, tag: str) -> None:
        node: Element | None = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.current = node.parent

    def handle_data(self, data: str) -> None:
        self.current.children.append(data)


def parse(html: str) -> Element:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root
