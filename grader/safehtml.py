"""No student HTML or JavaScript runs in a page the pack writes.

A feedback page shows what a student wrote: markdown answers (raw HTML allowed), outputs of any MIME
type, attachments. Three passes, all stdlib (``html.parser``):

* :func:`clean_fragment` (an HTML output, a raw cell) and :func:`clean_page` (the rendered page) are an
  **allow-list**: the input is written out again from html.parser's tokens, so only known tags, attributes,
  URL schemes (:func:`unsafe_url`) and styles come out, every text and attribute value escaped, and tricks
  that confuse a deny-list (``<ScRiPt>``, attributes split by tabs or ``/``, ``<scr<script>ipt>``,
  ``jav&#x61;script:``) have nothing to hide in. :func:`clean_page` keeps the template's ``<head>`` (its CSS
  and MathJax, with the Safe extension: the only scripts kept) and treats everything from ``<body>`` on,
  where all student content is, as untrusted.
* :func:`clean_markdown` (markdown cells, ``text/markdown`` and SVG outputs) must leave the text alone
  (``$a<b$`` is maths, not a tag): it removes only active elements, ``on*`` handlers, ``srcdoc`` and
  dangerous URLs and copies the rest byte for byte. What it misses (markdown and html.parser do not always
  agree on what is a tag), the page pass removes.

No input holds the grader up: the parsers stay linear in their input (:meth:`_Tolerant.feed_all`), every
cleaning call has a time budget (:data:`CLEAN_SECONDS`), past which the input is shown as escaped text, and
a markdown answer or an HTML fragment is cut at :data:`CELL_CAP` characters, with a note (nbconvert's
markdown renderer, which comes after us, has no limit of its own).
"""

from __future__ import annotations

import html
import re
import time
from html.parser import HTMLParser

__all__ = ["clean_fragment", "clean_markdown", "clean_page", "looks_active", "safe_markdown", "unsafe_url"]

#: Where nbconvert's template loads MathJax from (its ``mathjax_url``); the page's only remote script.
MATHJAX_PREFIX = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/"
SAFE_SCHEMES = frozenset(("http", "https", "mailto"))
IMAGE_TYPES = r"image/(?:png|jpe?g|gif|webp|bmp|svg\+xml)[;,]"
IMAGE_DATA = re.compile("data:" + IMAGE_TYPES)

ALLOWED_TAGS = frozenset("""
    html body main div span p br hr pre code kbd samp var tt b strong i em u s strike del ins mark small big sub sup
    q cite abbr dfn blockquote address h1 h2 h3 h4 h5 h6 ul ol li dl dt dd table thead tbody tfoot tr th td caption
    col colgroup a img figure figcaption details summary section article header footer nav aside center font label
    time ruby rt rp bdi bdo wbr hgroup""".split())
VOID_TAGS = frozenset(("br", "hr", "img", "wbr", "col"))
#: Elements whose content html.parser hands over as raw text: dropped with it in the body.
RAW_TEXT = frozenset(("script", "style"))
GLOBAL_ATTRS = frozenset(("class", "id", "title", "lang", "dir", "align", "valign", "width", "height", "style",
                          "role", "tabindex"))
TAG_ATTRS = {tag: frozenset(names.split()) for tag, names in {
    "a": "href name", "img": "src alt", "td": "colspan rowspan headers scope abbr",
    "th": "colspan rowspan headers scope abbr", "ol": "start type reversed", "li": "value",
    "table": "border cellpadding cellspacing summary", "col": "span", "colgroup": "span", "blockquote": "cite",
    "q": "cite", "del": "cite", "ins": "cite", "time": "datetime", "details": "open"}.items()}
URL_ATTRS = frozenset(("href", "src", "cite"))
#: A ``style`` attribute is dropped when it could run or load something (any URL: ``url(``, ``image-set``, ``//``),
#: hides a trick from a plain reading (an escape, a comment) or draws over the page (:func:`_unsafe_style`).
UNSAFE_STYLE = re.compile(r"url\s*\(|src\s*\(|image-set|//|expression|javascript|vbscript|@import|behavior"
                          r"|binding|\\|/\*|<|&", re.I)
#: Properties (name prefixes, vendors' too) that move, scale, clip or stack an element over the grader's text.
MOVING = ("transform", "translate", "rotate", "scale", "zoom", "clip", "mask", "offset", "inset", "z-index",
          "perspective", "filter", "backdrop-filter", "box-shadow", "outline")
URL_CONTROLS = re.compile(r"[\x00-\x20\x7f]+")
SCHEME = re.compile(r"([a-z][a-z0-9+.\-]*):")
#: Seconds one cleaning call may take before its input is shown as escaped text instead.
CLEAN_SECONDS = 10.0
#: Characters of a markdown answer or an HTML fragment that a feedback page shows; the rest is cut.
CELL_CAP = 200_000


class _TooSlow(Exception):
    """A cleaning call ran past its time budget (or :func:`_surgery` past its work budget)."""


def _cut(text: str, what: str) -> str:
    """``text`` cut at :data:`CELL_CAP` characters, with a note saying so (already cut: unchanged)."""
    if len(text) <= CELL_CAP:
        return text
    note = f"\n\n[{what} cut at {CELL_CAP // 1000} kB for the feedback page]\n"
    return text if text[CELL_CAP:] == note else text[:CELL_CAP] + note


def unsafe_url(value: str, *, image: bool = False) -> bool:
    """Whether a URL (an attribute value as the browser reads it, entities already decoded) could run
    code: any scheme but http, https and mailto (``javascript:``, ``vbscript:``, ``data:``, ...), seen
    through the tabs, newlines and control characters a browser ignores. ``image``: an ``<img src>``, only
    ``data:image/...`` (a remote image, ``//host/x`` too, tells its server who opened the page)."""
    plain = URL_CONTROLS.sub("", value).lower()
    if image:
        return not IMAGE_DATA.match(plain)
    m = SCHEME.match(plain)
    return m is not None and m.group(1) not in SAFE_SCHEMES   # None: relative (#anchor, path)


def _unsafe_style(value: str) -> bool:
    """Whether a ``style`` attribute matches :data:`UNSAFE_STYLE` or a declaration of it is :data:`MOVING`, a
    ``position`` but ``static``, or a negative margin or offset (one declaration at a time: linear)."""
    for declaration in value.lower().split(";"):
        name, _, val = declaration.partition(":")
        name = re.sub(r"^-[a-z]+-", "", name.strip())
        if name.startswith(MOVING) or name == "position" and val.strip() != "static" or "-" in val \
                and name.startswith(("margin", "top", "left", "right", "bottom", "text-indent")):
            return True
    return bool(UNSAFE_STYLE.search(value))


def _safe_attrs(tag: str, attrs: list[tuple[str, str | None]]) -> list[tuple[str, str]]:
    """The attributes of ``tag`` the allow-list keeps (a value None: ``""``): known, no unsafe URL or style."""
    allowed = TAG_ATTRS.get(tag, frozenset())
    return [(name, value or "") for name, value in attrs
            if (name in GLOBAL_ATTRS or name in allowed or name.startswith("aria-"))
            and not (name in URL_ATTRS and unsafe_url(value or "", image=(tag == "img" and name == "src")))
            and not (name == "style" and _unsafe_style(value or ""))]


COMMENT_CLOSE = re.compile(r"--\s*>")             # as _markupbase reads them
SECTION_CLOSE = {**dict.fromkeys(("temp", "cdata", "ignore", "include", "rcdata"), re.compile(r"]\s*]\s*>")),
                 **dict.fromkeys(("if", "else", "endif"), re.compile(r"]\s*>"))}
DECL_NAME = re.compile(r"[a-zA-Z][-_.a-zA-Z0-9]*")


class _Tolerant(HTMLParser):
    """html.parser raises AssertionError on some malformed declarations (``<![x``, ``<![=``): a
    student must not be able to stop their own page with one. Such a ``<!`` is plain text.
    Past the ``deadline`` of :meth:`feed_all`, the next token raises :class:`_TooSlow`. Comments, processing
    instructions, CDATA and bogus declarations are dropped (HTMLParser's own handlers do nothing)."""

    def parse_html_declaration(self, i):
        try:
            return super().parse_html_declaration(i)
        except AssertionError:
            self.handle_data("<!")
            return i + 2

    # A comment or a marked section ends with its own closing (``-->``, ``]]>``, ``]>``), searched for from
    # where it starts to the end of the text: from every ``<!--`` after the last ``-->`` (``"<!--x>" * N``),
    # a rescan of the rest that fails. Where none follows, it fails at once, as it would have.
    def parse_comment(self, i, report=1):
        if self._last_match(COMMENT_CLOSE) < i + 4:
            return -1
        return super().parse_comment(i, report)

    def parse_marked_section(self, i, report=1):
        name = DECL_NAME.match(self.rawdata, i + 3)
        close = SECTION_CLOSE.get(name.group().lower() if name else "")
        if close is not None and self._last_match(close) < i + 3:
            return -1
        return super().parse_marked_section(i, report)

    def _last_match(self, pattern: re.Pattern) -> int:
        """Where the last match of ``pattern`` in the text being parsed starts (-1: none), found once per text."""
        cache = self.__dict__.setdefault("_last_matches", {})
        key = (pattern.pattern, len(self.rawdata))
        if key not in cache:
            last = max((m.start() for m in pattern.finditer(self.rawdata)), default=-1)
            while last >= 0 and (m := pattern.search(self.rawdata, last + 1)):   # one overlapping the last
                last = m.start()
            cache[key] = last
        return cache[key]

    def updatepos(self, i, j):   # html.parser's step after every token
        if time.perf_counter() > self.deadline:
            raise _TooSlow
        return super().updatepos(i, j)

    def feed_all(self, text: str, deadline: float) -> None:
        """``feed`` and ``close`` on ``text`` before ``deadline`` (a :func:`time.perf_counter` value), in time
        linear in its length. Every construct html.parser knows ends with a ``>``: after the text's last ``>``
        there is only text, but the parser rescans the rest from each ``<`` there to find that out. That tail is
        handed over as text, as the parser would have (unless an unclosed ``<script>`` or ``<style>`` swallows
        it, as it then does here too)."""
        self.deadline = deadline
        gt = text.rfind(">") + 1
        self.feed(text[:gt])
        self.close()
        tail = text[gt:]
        if tail and self.cdata_elem is None:
            self.handle_data(html.unescape(tail) if self.convert_charrefs else tail)


def _start(tag: str, attrs: list[tuple[str, str]]) -> str:
    return "<" + tag + "".join(f' {n}="{html.escape(v, quote=True)}"' for n, v in attrs) + ">"


class _AllowList(_Tolerant):
    """Re-serialise HTML keeping only what is allowed. ``page``: a whole nbconvert page, whose head (the
    template's own) keeps its CSS and MathJax; otherwise a fragment, treated as body throughout."""

    def __init__(self, page: bool):
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.in_body = not page
        self.raw: str | None = None       # inside script/style: "keep" (the template's) or "drop"
        self.raw_tag = ""

    # -- head: the template's
    def _head_start(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        src = values.get("src") or ""
        if tag in ("html", "head", "title"):
            self.out.append(f"<{tag}>")
        elif tag == "meta" and set(values) == {"charset"}:
            self.out.append(_start("meta", [("charset", values["charset"] or "utf-8")]))
        elif tag == "style":
            self._raw(tag, "keep", "<style>")
        elif tag == "script" and set(values) == {"src"} and src.startswith(MATHJAX_PREFIX) and "Safe" in src \
                and '"' not in src:
            # MathJax with its Safe extension, which refuses \href{javascript:...} and friends in TeX
            self._raw(tag, "keep", _start("script", [("src", src)]))
        elif tag == "script" and values == {"type": "text/x-mathjax-config"}:
            self._raw(tag, "keep", '<script type="text/x-mathjax-config">')
        elif tag in RAW_TEXT:
            self._raw(tag, "drop")

    def _raw(self, tag: str, how: str, opening: str = "") -> None:
        self.raw, self.raw_tag = how, tag
        self.out.append(opening)

    # -- tokens
    def handle_starttag(self, tag, attrs, closed=False):
        if self.raw is not None:
            return
        if not self.in_body and (closed or tag != "body"):
            if not (closed and tag in RAW_TEXT):   # a self-closed <script/> would leave the tag open in a browser
                self._head_start(tag, attrs)
            return
        self.in_body = True
        if tag in RAW_TEXT and not closed:
            self._raw(tag, "drop")
        elif tag in ALLOWED_TAGS:
            self.out.append(_start(tag, _safe_attrs(tag, attrs)))
            if closed and tag not in VOID_TAGS:
                self.out.append(f"</{tag}>")

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs, closed=True)

    def handle_endtag(self, tag):
        if self.raw is None:
            if (tag in ALLOWED_TAGS and tag not in VOID_TAGS) if self.in_body else tag in ("html", "head", "title"):
                self.out.append(f"</{tag}>")
        elif tag == self.raw_tag:
            if self.raw == "keep":
                self.out.append(f"</{tag}>")
            self.raw = None

    def handle_data(self, data):
        if self.raw == "keep":
            self.out.append(data)   # the template's CSS or MathJax configuration, as written
        elif self.raw is None:
            self.out.append(html.escape(data.replace("\x00", ""), quote=False))

    def handle_decl(self, decl):
        if not self.in_body and decl.strip().lower() == "doctype html":
            self.out.append("<!DOCTYPE html>")


def _allow_list(text: str, page: bool, slow: str = "{}") -> str:
    """``text`` through :class:`_AllowList`; past :data:`CLEAN_SECONDS`, ``slow`` with the text escaped in it."""
    parser = _AllowList(page)
    try:
        parser.feed_all(text, time.perf_counter() + CLEAN_SECONDS)
    except (_TooSlow, RecursionError):
        return slow.format(html.escape(text))
    return "".join(parser.out)


def clean_fragment(text: str) -> str:
    """An HTML fragment (a ``text/html`` output, a raw cell) with only allowed tags and attributes, cut
    at :data:`CELL_CAP` characters; all of it escaped text if cleaning runs past :data:`CLEAN_SECONDS`."""
    return _allow_list(_cut(text, "HTML"), page=False)


#: What a page that could not be cleaned in time becomes: its source, escaped, under a note.
SLOW_PAGE = ('<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n<title>Feedback</title>\n</head>\n<body>\n'
             "<p><b>This page took too long to make safe to show, so its HTML source is shown as text.</b></p>\n"
             "<pre>{}</pre>\n</body>\n</html>\n")


def clean_page(text: str) -> str:
    """A whole page rendered by nbconvert: the template's head as it was (CSS, MathJax), the body
    through the allow-list; past :data:`CLEAN_SECONDS`, the page's source as escaped text (:data:`SLOW_PAGE`)."""
    return _allow_list(text, page=True, slow=SLOW_PAGE)


# ----------------------------------------------------------------------------- markdown and SVG
#: Removed from markdown and SVG wherever they appear (their content stays, except a script's or style's).
ACTIVE_TAGS = frozenset("""
    script style iframe frame frameset object embed applet base meta link form input button textarea select option
    noscript template portal xmp plaintext noembed noframes param math handler listener foreignobject animate set
    animatemotion animatetransform animatecolor discard audio video source track""".split())
ACTIVE_ATTRS = frozenset(("srcdoc", "formaction", "action", "background", "dynsrc", "lowsrc", "ping", "srcset",
                          "codebase", "classid", "archive", "data", "poster", "xmlns:xlink", "attributename",
                          "values", "from", "to", "by"))
LINK_ATTRS = frozenset(("href", "src", "xlink:href", "cite", "longdesc", "usemap", "manifest", "icon"))
MD_LINK = re.compile(r"(\]\(\s*<?)([^\s)>]*)")                                # [text](url  ![alt](url
MD_REFERENCE = re.compile(r"^([ \t]{0,3}\[[^\]\n]+\]:[ \t]*<?)(\S+?)(?=>|\s|$)", re.M)   # [ref]: url
MD_AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.\-]{1,31}:[^\s<>]*)>")       # <scheme:...>
MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
#: html.parser's own attribute pattern (``html.parser.attrfind_tolerant``, Python 3.11), to cut a tag's text
#: into its attributes exactly where the parser did.
ATTRIBUTE = re.compile(r'((?<=[\'"\s/])[^\s/>][^\s/=>]*)(\s*=+\s*(\'[^\']*\'|"[^"]*"|(?![\'"])[^>\s]*))?(?:\s|/(?!>))*')
TAG_NAME = re.compile(r"<[^\t\n\r\f />\x00]+")
TAG_NAME_MD = re.compile(r"[a-z][a-z0-9-]*")    # a tag name as CommonMark reads raw HTML (html.parser lowercases)


def _safe_link(m: re.Match) -> str:
    """A markdown link or reference (groups: what precedes the destination, the destination), its destination
    ``#`` if unsafe. Entities and backslash escapes are decoded before it is a URL; ``attachment:name`` is the
    cell's own attachment, which nbconvert turns into an image data URL."""
    url = MD_ESCAPE.sub(r"\1", html.unescape(m.group(2)))
    unsafe = not url.startswith("attachment:") and unsafe_url(url) and unsafe_url(url, image=True)
    return m.group(1) + ("#" if unsafe else m.group(2))


RAW_CLOSE = {tag: re.compile(rf"</\s*{tag}\s*>", re.I) for tag in RAW_TEXT}


class _Surgeon(_Tolerant):
    """Copy text as it is, except active elements and attributes (see :func:`clean_markdown`)."""

    def __init__(self, nested: list):
        super().__init__(convert_charrefs=False)
        self.out: list = []
        self.nested = nested   # (text, where its cleaned form goes): see _surgery
        self.drop_raw = False
        self.no_cdata = False
        self.start_at = self.end_at = 0

    def parse_starttag(self, i):
        self.start_at = i
        return super().parse_starttag(i)

    def set_cdata_mode(self, elem):
        if not self.no_cdata:   # no_cdata: a <script> or <style> never closed, its "content" is parsed as markup
            super().set_cdata_mode(elem)
        self.no_cdata = False

    def _odd_name(self, raw: str, prefix: str) -> None:
        """A tag whose name markdown would not take for one (``<scr<script>``: html.parser reads the name
        ``scr<script``, mistune and CommonMark text and then a ``<script>``): the rest of its text is cleaned
        on its own, as markdown would read it (what the removal joins up, ``<scr`` + ``ipt>``, the next round
        of :func:`clean_markdown` sees). Queued, not cleaned here: a name holds as many ``<`` as the student
        typed, and one nested call per ``<`` would hit Python's recursion limit."""
        slot: list = []
        self.out += [prefix, slot]
        self.nested.append((raw[len(prefix):], slot))

    def handle_starttag(self, tag, attrs):
        if self.drop_raw:
            return
        raw = self.get_starttag_text() or ""
        if ":" in tag:   # <https://...> is a markdown autolink (a safe one: see MD_AUTOLINK); <svg:script> is not
            if MD_AUTOLINK.fullmatch(raw) and not unsafe_url(html.unescape(raw[1:-1])):
                self.out.append(raw)
            return
        if not TAG_NAME_MD.fullmatch(tag):
            self._odd_name(raw, "<")
            return
        if tag in ACTIVE_TAGS:
            if tag in RAW_TEXT and not raw.rstrip().endswith("/>"):   # its content: dropped, or markup if never closed
                closed = self._last_match(RAW_CLOSE[tag]) >= self.start_at + len(raw)   # found once per text
                self.drop_raw, self.no_cdata = closed, not closed
            return
        if not any(self._bad_attr(tag, name.lower(), value or "") for name, value in attrs):
            self.out.append(raw)
            return
        # rewrite the tag from its own text: the surviving attributes keep their spelling and case (SVG)
        head = TAG_NAME.match(raw)
        kept = [raw[: head.end()]] if head else [f"<{tag}"]
        for m in ATTRIBUTE.finditer(raw, head.end() if head else 0):
            name = m.group(1)
            if not name or name in ("/", ">"):
                continue
            value = m.group(3)
            if value and value[:1] == value[-1:] and value[:1] in "'\"":
                value = value[1:-1]
            if not self._bad_attr(tag, name.lower().lstrip("/"), html.unescape(value or "")):
                kept.append(" " + m.group(0).strip())
        kept.append(" />" if raw.rstrip().endswith("/>") else ">")
        self.out.append("".join(kept))

    handle_startendtag = handle_starttag   # no end tag of its own: the text is copied as written

    @staticmethod
    def _bad_attr(tag: str, name: str, value: str) -> bool:
        name = name.strip("/ \t\n\r\f")
        if name.startswith("on") or name in ACTIVE_ATTRS:
            return True
        if name in LINK_ATTRS or name.endswith(":href"):
            return unsafe_url(value, image=(tag in ("img", "image") and name in ("src", "href", "xlink:href")))
        if name == "style":
            return _unsafe_style(value)
        return tag == "meta" or name == "http-equiv"

    def parse_endtag(self, i):
        self.end_at = i
        return super().parse_endtag(i)

    def handle_endtag(self, tag):
        if self.drop_raw:
            self.drop_raw = tag not in RAW_TEXT
        elif tag not in ACTIVE_TAGS and ":" not in tag:
            gt = self.rawdata.find(">", self.end_at)   # the end tag as written (SVG's </linearGradient>)
            raw = self.rawdata[self.end_at:gt + 1] if gt >= 0 else f"</{tag}>"
            if TAG_NAME_MD.fullmatch(tag):
                self.out.append(raw)
            else:
                self._odd_name(raw, "</")

    def handle_data(self, data):
        if not self.drop_raw:
            self.out.append(data)

    def handle_entityref(self, name):
        self.handle_data(f"&{name};")

    def handle_charref(self, name):
        self.handle_data(f"&#{name};")


#: Odd tag names (``<a<a<a...``) cleaned one after the other in one text: past this many, or past
#: eight times the text's length parsed in all, the text is shown escaped (each round reparses the rest
#: of the name, so the work would grow with the square of its length).
MAX_NESTED = 2000


def _surgery(text: str, deadline: float) -> str:
    """:class:`_Surgeon` on ``text``, the rest of every odd tag name cleaned on its own, iteratively:
    a work list, never recursion, so no markdown can exhaust the stack. Past ``deadline``: :class:`_TooSlow`."""
    root: list = []
    work = [(text, root)]
    rounds, budget = 0, 8 * len(text) + 200_000   # characters parsed, in all rounds
    while work:
        piece, slot = work.pop()
        rounds += 1
        budget -= len(piece)
        if rounds > MAX_NESTED or budget < 0:
            raise _TooSlow
        parser = _Surgeon(work)
        parser.feed_all(piece, deadline)
        slot.extend(parser.out)
    out, stack = [], [root]
    while stack:   # flatten the nested slots, in order
        part = stack.pop()
        if isinstance(part, list):
            stack.extend(reversed(part))
        else:
            out.append(part)
    return "".join(out)


def clean_markdown(text: str) -> str:
    """Markdown (or SVG) without active content, the rest of the text unchanged: no script, style,
    iframe, object, embed, base, meta, form or SVG animation element, no ``on*`` handler, ``srcdoc`` or
    ``formaction``, no dangerous URL in an attribute, a markdown link, a reference or an autolink.
    Repeated until nothing changes, so removing one piece cannot assemble another
    (``<scr<script></script>ipt>``). Past :data:`CLEAN_SECONDS`, the text is shown escaped."""
    deadline, cleaned = time.perf_counter() + CLEAN_SECONDS, text
    try:
        for _ in range(10):
            before = cleaned
            cleaned = MD_AUTOLINK.sub(lambda m: html.escape(m.group(1)) if unsafe_url(html.unescape(m.group(1)))
                                      else m.group(0), cleaned)
            cleaned = MD_REFERENCE.sub(_safe_link, MD_LINK.sub(_safe_link, cleaned))
            cleaned = _surgery(cleaned, deadline)
            if cleaned == before:
                return cleaned
    except (_TooSlow, RecursionError):   # RecursionError: a stdlib parser on some input we have not met
        return html.escape(text)
    return html.escape(cleaned)   # still changing after ten rounds: show it as text


# ----------------------------------------------------------------------------- checked against the renderer
ACTIVE_MARKUP = re.compile(r"<\s*/?\s*(?:script|style|iframe|frame|frameset|object|embed|applet|base|meta|link|form"
                           r"|svg|math|template|noscript|textarea|xmp|plaintext|portal|input|button|select|noembed"
                           r"|noframes|animate|set|handler|listener|foreignobject)(?![\w-])", re.I)
HANDLER = re.compile(r"<[^>]*?[\s/\"'`]on[a-z]+\s*=", re.I)
ACTIVE_URL = re.compile(r"(?:href|src|action|formaction|data|poster|background|srcdoc|cite|ping|xlink:href)=[\"'`]?"
                        rf"(?:javascript|vbscript|livescript|data(?!:{IMAGE_TYPES})):", re.I)
STYLE_CODE = re.compile(r"style=[^>]*(?:expression|javascript|url\()", re.I)


def looks_active(rendered: str) -> bool:
    """Whether rendered HTML might hold active content: a conservative look (an honest page answers no;
    a false alarm only means a student's HTML is shown as text), used to check :func:`clean_markdown`
    against what nbconvert's markdown renderer really makes of its output."""
    squeezed = URL_CONTROLS.sub("", html.unescape(rendered))
    return bool(ACTIVE_MARKUP.search(rendered) or HANDLER.search(rendered) or ACTIVE_URL.search(squeezed)
                or STYLE_CODE.search(squeezed))


def _render_markdown(text: str, attachments: dict | None) -> str | None:
    """nbconvert's rendering of a markdown cell (as its HTML exporter does), or None if it fails."""
    try:
        from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

        return MarkdownWithMath(renderer=IPythonRenderer(escape=False, attachments=attachments or {})).render(text)
    except Exception:  # noqa: BLE001 - no nbconvert, or a notebook it cannot render (reported when the page is)
        return None


def safe_markdown(text: str, attachments: dict | None = None) -> str:
    """:func:`clean_markdown`, checked against nbconvert's own markdown renderer: markdown and
    html.parser do not always agree on where a tag starts (``<img src=x y<script>``), so when the
    rendered cell still :func:`looks_active`, every ``<`` of the cell is escaped (its HTML is shown as
    text); should even that render as active (a link), the cell becomes an indented code block. An
    answer over :data:`CELL_CAP` characters is cut there first, with a note (:func:`_cut`)."""
    text = _cut(text, "answer")
    cleaned = clean_markdown(text)
    rendered = _render_markdown(cleaned, attachments)
    if rendered is None or not looks_active(rendered):
        return cleaned
    escaped = clean_markdown(cleaned.replace("<", "&lt;"))
    rendered = _render_markdown(escaped, attachments)
    if rendered is not None and not looks_active(rendered):
        return escaped
    return "\n".join("    " + line for line in text.splitlines())
