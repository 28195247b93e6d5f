"""The user's documents as passages: files read (.md, .txt, .html), their text split by headings and
paragraphs into passages short enough to put a few of them into a small LLM's prompt.

A passage keeps the heading it sits under (and its document's title), because a question names the
thing ("the Harbor Lamp's warranty") while the paragraph under the heading often only says "it".
"""
from __future__ import annotations

import html
import logging
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from ..runtime.errors import TandemError

log = logging.getLogger(__name__)

SUFFIXES = (".md", ".markdown", ".txt", ".text", ".html", ".htm")
MAX_FILE_BYTES = 20 * 1024 * 1024  # a "document" larger than this is almost surely not one
PASSAGE_WORDS = 80  # a few of these fit a small model's prompt beside the dialogue


class KnowledgeError(TandemError):
    """The knowledge path cannot be used (missing, empty, nothing readable in it)."""


@dataclass(frozen=True)
class Passage:
    path: str  # the document's path relative to the knowledge root
    pos: int  # the passage's place in its document
    title: str  # "document title: section heading"
    body: str

    @property
    def text(self) -> str:
        return f"{self.title}: {self.body}" if self.title else self.body


@dataclass(frozen=True)
class Section:
    heading: str
    paragraphs: list[str]


def list_documents(root: Path) -> list[Path]:
    """The files under `root` (or `root` itself) that look like documents, in a stable order."""
    root = Path(root)
    if not root.exists():
        raise KnowledgeError(f"--knowledge: no such file or folder: {root}")
    if root.is_file():
        return [root]
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES
                   and not any(part.startswith(".") for part in p.relative_to(root).parts))
    if not files:
        raise KnowledgeError(f"--knowledge: {root} holds no documents ({', '.join(SUFFIXES)} files)")
    return files


def read_text(path: Path) -> str:
    """A document's text; KnowledgeError (naming the file and why) for one that is not text."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise KnowledgeError(f"{path}: {size / 1e6:.0f} MB is too large for a document (at most "
                                 f"{MAX_FILE_BYTES // (1024 * 1024)} MB)")
        data = path.read_bytes()
    except OSError as e:
        raise KnowledgeError(f"{path}: cannot be read ({e.strerror or e})") from e
    if b"\x00" in data[:8192]:
        raise KnowledgeError(f"{path}: a binary file, not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        try:
            return data.decode("cp1252")  # old Windows text: every byte but five decodes
        except UnicodeDecodeError as e:
            raise KnowledgeError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e


class _HTMLText(HTMLParser):
    """Headings and text blocks of an HTML page; scripts, styles and the head skipped."""
    BLOCKS = {"p", "div", "li", "tr", "td", "th", "br", "section", "article", "blockquote", "pre", "dd", "dt"}
    SKIP = {"script", "style", "head", "noscript", "template", "svg"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.title = ""
        self._buf: list[str] = []
        self._skip = 0
        self._heading: int | None = None
        self._in_title = False

    def _flush(self) -> None:
        text = " ".join("".join(self._buf).split())
        self._buf = []
        if text:
            self.lines.append(("#" * self._heading + " " + text) if self._heading else text)

    def handle_starttag(self, tag: str, attrs) -> None:  # noqa: ANN001
        if tag == "title":
            self._in_title = True
        if tag in self.SKIP:
            self._skip += 1
        elif re.fullmatch(r"h[1-6]", tag):
            self._flush()
            self._heading = int(tag[1])
        elif tag in self.BLOCKS:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in self.SKIP:
            self._skip = max(0, self._skip - 1)
        elif re.fullmatch(r"h[1-6]", tag):
            self._flush()
            self._heading = None
            self.lines.append("")
        elif tag in self.BLOCKS:
            self._flush()
            self.lines.append("")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self._buf.append(data)


def html_to_markdown(text: str) -> tuple[str, str]:
    """(title, the page as markdown-ish text: headings as '#' lines, blocks as paragraphs)."""
    p = _HTMLText()
    p.feed(text)
    p.close()
    p._flush()
    return " ".join(p.title.split()), "\n".join(p.lines)


_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_MD_MARKUP = re.compile(r"(\*\*|__|`|\[([^\]]*)\]\([^)]*\))")


def _plain(line: str) -> str:
    line = _MD_MARKUP.sub(lambda m: m.group(2) or "", line)
    return html.unescape(re.sub(r"<[^>]+>", " ", line)).strip(" \t*-+>")


def sections(text: str) -> tuple[str, list[Section]]:
    """(document title, its sections). Markdown headings, or in plain text a short line of its own
    with no closing full stop followed by a paragraph, start a section; blank lines end paragraphs."""
    title = ""
    out: list[Section] = [Section("", [])]
    para: list[str] = []
    lines = text.splitlines()

    def end_para() -> None:
        if para:
            out[-1].paragraphs.append(" ".join(para))
            para.clear()

    for i, raw in enumerate(lines):
        line = raw.strip()
        m = _MD_HEADING.match(line)
        prev_blank = i == 0 or not lines[i - 1].strip()
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        plain_heading = (not m and prev_blank and line and len(line.split()) <= 8 and nxt
                         and not line.endswith((".", ",", ";", ":", "?", "!")) and len(nxt.split()) > len(line.split()))
        first_line = not title and not any(s.paragraphs for s in out) and not para and len(out) == 1
        if first_line and not m and line and len(line.split()) <= 10 and not nxt \
                and not line.endswith((".", ",", ";", "?", "!")):
            title = _plain(line)  # a plain-text document's title: a short first line on its own
            continue
        if m or plain_heading:
            end_para()
            heading = _plain(m.group(2) if m else line)
            if not title and (not m or len(m.group(1)) == 1) and not any(s.paragraphs for s in out):
                title = heading
                continue
            out.append(Section(heading, []))
        elif not line:
            end_para()
        else:
            para.append(_plain(line))
    end_para()
    return title, [s for s in out if s.paragraphs]


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])", text) if s.strip()]


def split_passages(rel: str, text: str, max_words: int = PASSAGE_WORDS) -> list[Passage]:
    """A document's passages: each section's paragraphs packed up to `max_words`, a long paragraph
    split between sentences; each passage titled with its document and section."""
    if Path(rel).suffix.lower() in (".html", ".htm"):
        page_title, text = html_to_markdown(text)
    else:
        page_title = ""
    doc_title, secs = sections(text)
    doc_title = page_title or doc_title or Path(rel).stem.replace("-", " ").replace("_", " ")
    out: list[Passage] = []
    for sec in secs:
        title = f"{doc_title}: {sec.heading}" if sec.heading else doc_title
        chunk: list[str] = []
        pieces = [s for p in sec.paragraphs for s in (_sentences(p) if len(p.split()) > max_words else [p])]
        for piece in pieces:
            if chunk and len(" ".join(chunk + [piece]).split()) > max_words:
                out.append(Passage(rel, len(out), title, " ".join(chunk)))
                chunk = []
            chunk.append(piece)
        if chunk:
            out.append(Passage(rel, len(out), title, " ".join(chunk)))
    return out
