"""No student HTML or JavaScript runs in a feedback page, and every graded notebook gets one.

The cleaning passes of grader/safehtml.py on hostile snippets (unit level, milliseconds), then one
``feedback`` run (nbgrader, a few seconds) on a Task 1 course with a student whose answers and outputs
are full of active content and two students whose full run failed (no executed copy): their pages
are built from the submitted notebook with the judge's report and a note, and the leak check still
covers them. Pages are checked by :func:`active_content`, which reads them independently of the
sanitiser (what a browser would run: scripts, handlers, URLs, frames, ...)."""

from __future__ import annotations

import copy
import html
import json
import re
import warnings
from html.parser import HTMLParser

import pytest

from conftest import SOLUTIONS

STEM = "task1_infonce"

# ----------------------------------------------------------------------------- an independent reader
URL_ATTRS = ("href", "src", "action", "formaction", "xlink:href", "data", "poster", "background", "srcdoc",
             "cite", "codebase", "ping", "lowsrc", "dynsrc")
ACTIVE_ELEMENTS = ("iframe", "frame", "frameset", "object", "embed", "applet", "base", "form", "svg", "math",
                   "link", "portal", "noscript", "template")
#: A style that could draw over the grader's text or load something: read broadly (an honest page holds none).
OVERLAY_STYLE = re.compile(r"(?i)(?<!text-)transform|translate|rotate|scale|zoom|clip|z-index|inset|offset|outline|shadow"
                           r"|position\s*:(?!\s*static\s*(?:;|$))|(?:margin|top|left|right|bottom|indent)[\w-]*\s*:[^;]*-"
                           r"|url\s*\(|image-set|//|\\|/\*")


class _Reader(HTMLParser):
    def __init__(self, elements, images=True):
        super().__init__(convert_charrefs=True)
        self.elements, self.images = elements, images
        self.found: list[str] = []
        self.in_body = False
        self.script = None

    def parse_html_declaration(self, i):   # html.parser gives up on "<![x": a browser reads a bogus comment
        try:
            return super().parse_html_declaration(i)
        except AssertionError:
            return i + 2

    def handle_starttag(self, tag, attrs):
        self._tag(tag, attrs)

    def handle_startendtag(self, tag, attrs):
        self._tag(tag, attrs)

    def _tag(self, tag, attrs):
        values = dict(attrs)
        if tag == "body":
            self.in_body = True
        if tag == "script":
            allowed = not self.in_body and (
                (list(values) == ["src"] and values["src"].startswith("https://cdnjs.cloudflare.com/ajax/libs/mathjax/"))
                or values == {"type": "text/x-mathjax-config"})
            if not allowed:
                self.found.append(f"<script {values}>")
        if tag == "meta" and ("http-equiv" in values or "content" in values):
            self.found.append(f"<meta {values}>")
        if tag in self.elements:
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}=...>")
            if name in URL_ATTRS and value is not None:
                plain = re.sub(r"[\x00-\x20]+", "", value).lower()
                if plain.startswith(("javascript:", "vbscript:", "data:text", "data:application", "livescript:")):
                    self.found.append(f"<{tag} {name}={value[:40]!r}>")
            if name == "style" and value and re.search(r"(?i)expression|javascript|url\(", value):
                self.found.append(f"<{tag} style={value[:40]!r}>")
            elif name == "style" and value and OVERLAY_STYLE.search(value):
                self.found.append(f"<{tag} style={value[:40]!r}> (draws over the page or loads something)")
            image = name == "srcset" or tag == "img" and name == "src"
            if self.images and image and not re.match(r"\s*(?:data:image/|#)", value or "", re.I):
                self.found.append(f"<{tag} {name}={(value or '')[:40]!r}> (a remote or relative image)")


def active_content(page: str, elements=ACTIVE_ELEMENTS, images: bool = True) -> list[str]:
    """What in ``page`` a browser would run or load as active content (the template's MathJax aside), or
    that would draw over the grader's text or load an image from elsewhere (a style that moves, scales,
    clips or stacks, a negative margin or offset, any URL in a style, an image that is not ``data:``).
    A page must hold none of ``elements`` (inline SVG and MathML included: the page pass drops them).
    ``images=False``: images from elsewhere aside (markdown's own pass leaves them to the page pass)."""
    reader = _Reader(elements, images)
    reader.feed(page)
    reader.close()
    body = page.split("<body", 1)[-1]
    if re.search(r"(?i)<\s*script", body):
        reader.found.append("a <script> tag in the body")
    return reader.found


# ----------------------------------------------------------------------------- hostile input
HOSTILE_HTML = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '<a href="javascript:alert(1)">click</a>',
    "<svg onload=alert(1)>",
    "<svg/onload=alert(1)>",
    '<iframe src="https://example.org/"></iframe>',
    "<ScRiPt>alert(1)</sCrIpT>",
    "<img\nsrc=x\tonerror\n=\talert(1)>",
    "<scr<script>ipt>alert(1)</script>",
    "<scr<script></script>ipt>alert(1)</script>",
    '<a href="jav&#x61;script:alert(1)">x</a>',
    '<a href="jav&#x61script&colon;alert(1)">x</a>',
    '<a href=" java\tscript:alert(1)">x</a>',
    '<a href="vbscript:msgbox(1)">x</a>',
    '<a href="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==">x</a>',
    '<object data="x"></object><embed src="x">',
    '<base href="https://example.org/">',
    '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
    '<form action="javascript:alert(1)"><button formaction="javascript:alert(1)">go</button></form>',
    '<svg><a xlink:href="javascript:alert(1)"><text>t</text></a><animate attributeName="href" to="javascript:alert(1)"/></svg>',
    '<div style="background:url(javascript:alert(1))">s</div>',
    "<!--><script>alert(1)</script>-->",
    '<img src="x"onerror="alert(1)">',
    '<details open ontoggle=alert(1)>',
    '<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>',
]
#: A written answer that draws over the grader's report ("30/30 points") or tracks who opens the page.
OVERLAY_HTML = [
    '<div style="transform:translate(0,-400px)">Score: 30/30</div>',
    '<span style="transform: scale(50)">X</span>',
    '<p style="rotate: 180deg">r</p>', '<p style="translate: 0 -300px">t</p>', '<p style="scale: 40">s</p>',
    '<div style="margin-top:-400px">m</div>', '<div style="margin:-1em">m</div>',
    '<div style="margin: 0 0 0 -20em">m</div>', '<div style="margin-top:calc(0px - 400px)">m</div>',
    '<div style="margin-block-start: -9em">m</div>', '<div style="text-indent:-9999px">i</div>',
    '<div style="position:relative; top:-500px">p</div>', '<div class="cell" style="top:-3em">p</div>',
    '<div style="left: -40px">p</div>', '<div style="inset: -100px 0 0 0">p</div>',
    '<div style="position:absolute;top:0;left:0;width:100%;background:white">p</div>',
    '<div style="color: red; position: sticky">p</div>', '<div style="POSITION: FIXED">p</div>',
    '<div style="position: static !important; z-index:9999">z</div>', '<div style="zoom: 50">z</div>',
    '<div style="clip-path: inset(0 0 0 0)">c</div>', '<div style="-webkit-transform: rotate(180deg)">w</div>',
    '<div style="tr\\61nsform: rotate(180deg)">e</div>', '<div style="trans/**/form: rotate(180deg)">c</div>',
    '<div style="transform:/**/rotate(180deg)">c</div>', '<div style="TRANSFORM: ROTATE(180DEG)">u</div>',
    '<div style="transform: rotate(180deg) !important">i</div>', '<div style="margin-top: -400px !important">i</div>',
    '<div style="transform&#58;rotate(1turn)">e</div>', "<div style='color:red;transform:translateY(-20em)'>q</div>",
    '<div style="offset-path: path(\'M0 -400\'); offset-distance: 100%">o</div>',
    '<span style="outline: 9999px solid white">o</span>', '<span style="box-shadow: 0 0 0 9999px white">b</span>',
    '<img src="https://tracker.example/pixel.png?student=x">', '<img src="//tracker.example/p.png">',
    '<IMG SRC=" HTTP://tracker.example/p.png" alt=a>', '<img src="p.png">',
    '<img srcset="https://tracker.example/p.png 1x" alt=s>',
    '<div style="background:url(https://tracker.example/p.png)">b</div>',
    '<div style="background-image: URL( \'https://tracker.example/p.png\' )">b</div>',
    '<div style="background-image: image-set(\'https://tracker.example/p.png\' 1x)">b</div>',
    '<div style="background: u&#114;l(https://tracker.example/p.png)">b</div>',
]
HOSTILE_HTML += OVERLAY_HTML
#: Styled, honest answers: each must come out of every cleaner with all its attributes.
HONEST_HTML = [
    '<span style="color: #c00">red</span> and <b>bold</b>, <span style="background-color: yellow">marked</span>',
    '<p style="font-weight:bold; text-align:center; text-transform: uppercase">centred</p>',
    '<table style="border-collapse: collapse"><tr><th style="border-top: 1px solid black">K</th>'
    '<td style="padding: 4px; border: 1px solid #999">0.93</td></tr></table>',
    "<pre><code>x = a[-1] - b  # margin: -1</code></pre>",
    '<img src="data:image/png;base64,iVBORw0KGgo=" alt="my plot" width="40">',
    '<div style="margin: 0 auto; max-width: 40em; position: static">a column</div>',
]
#: Markdown's own image syntax for a remote image: only the page pass sees it as an image.
REMOTE_MARKDOWN = ["![pixel](https://tracker.example/md.png)", "![by ref][px]\n\n[px]: https://tracker.example/ref.png"]
HOSTILE_MARKDOWN = HOSTILE_HTML + [
    "[click](javascript:alert(1))",
    "[click](jav&#x61;script:alert(1))",
    "[click]( <javascript:alert(1)> )",
    "![img](javascript:alert(1))",
    "<javascript:alert(1)>",
    "[ref]: javascript:alert(1)\n\n[click][ref]",
]


def _render_markdown(text: str) -> str:
    """What nbconvert makes of a markdown cell (raw HTML passes through it)."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return markdown2html_mistune(text)


@pytest.mark.parametrize("snippet", HOSTILE_HTML)
def test_html_fragments_lose_their_active_content(snippet):
    from grader.safehtml import clean_fragment, clean_page

    assert active_content(clean_fragment(snippet)) == []
    assert active_content(clean_page("<html><head></head><body>" + snippet + "</body></html>")) == []
    assert active_content(clean_fragment(snippet)) == active_content(clean_fragment(clean_fragment(snippet)))


@pytest.mark.parametrize("snippet", HOSTILE_MARKDOWN)
def test_markdown_answers_lose_their_active_content(snippet):
    from grader.safehtml import clean_markdown

    cleaned = clean_markdown("My answer: " + snippet + " (end)")
    inert = [e for e in ACTIVE_ELEMENTS if e not in ("svg", "math")]   # inert without scripts and handlers
    assert active_content(_render_markdown(cleaned), inert) == [], cleaned
    assert "My answer:" in cleaned and "(end)" in cleaned


def _attributes(text: str) -> list[tuple]:
    class Attrs(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.extend((tag, name, value) for name, value in attrs)

    found: list[tuple] = []
    Attrs().feed(text)
    return found


@pytest.mark.parametrize("snippet", HONEST_HTML)
def test_honest_styles_tables_code_and_data_images_survive(snippet):
    from grader.safehtml import clean_fragment, clean_markdown, clean_page, safe_markdown

    assert clean_markdown(snippet) == snippet and safe_markdown(snippet) == snippet
    assert _attributes(clean_fragment(snippet)) == _attributes(snippet)
    assert _attributes(clean_page("<html><head></head><body>" + snippet + "</body></html>")) == _attributes(snippet)
    assert active_content(snippet) == []   # the reader passes them too


def test_a_remote_image_in_markdown_syntax_is_dropped_by_the_page_pass():
    from grader.safehtml import clean_page, safe_markdown

    for snippet in REMOTE_MARKDOWN:
        rendered = _render_markdown(safe_markdown("My answer: " + snippet))
        assert active_content(rendered), rendered   # the renderer makes an <img src="https://...">
        page = clean_page("<html><head></head><body>" + rendered + "</body></html>")
        assert active_content(page) == [] and "tracker.example" not in page and "<img" in page, page


def test_style_checks_stay_linear():
    """A style of 200 kB of declarations (the cap of an answer) is checked in time linear in its length."""
    from grader.safehtml import clean_markdown

    for piece in ("margin:", "color:red;", "top: 1px ", "position:"):
        hostile = f'<p style="{_sized(piece, 200_000)}">x</p>'
        assert _seconds(clean_markdown, hostile) < 20 * max(_seconds(clean_markdown, _sized(BENIGN, 200_000)), 0.005)


def test_the_reader_sees_what_the_old_pages_held():
    """The checks above mean something: every hostile snippet is active content as raw HTML (an
    output, the old pages), and the markdown-only ones are once markdown has been rendered."""
    assert [s for s in HOSTILE_HTML if not active_content(s)] == []
    assert [s for s in HOSTILE_MARKDOWN[len(HOSTILE_HTML):] if not active_content(_render_markdown(s))] == []


#: Where html.parser and markdown disagree on what is a tag: the first pass misses these, the check
#: against nbconvert's own renderer (safe_markdown) does not.
DIFFERENTIAL = ["<img src=x y<script>alert(1)</script>", "<!--<script>alert(1)</script>",
                "<![CDATA[<script>alert(1)</script>", "a<![x <script>alert(1)</script>",
                "[x](javascript:alert(1) \"t\")", "<a/href=javascript:alert(1)>x</a>"]


@pytest.mark.parametrize("snippet", HOSTILE_MARKDOWN + DIFFERENTIAL)
def test_markdown_checked_against_the_renderer_holds_nothing_active(snippet):
    from grader.safehtml import safe_markdown

    assert active_content(_render_markdown(safe_markdown("My answer: " + snippet + " (end)"))) == []


def test_markdown_fuzz_renders_nothing_active():
    """Random soup of tag fragments, comments, CDATA, entities and links (seeded, 400 cells)."""
    import random

    from grader.safehtml import clean_page, safe_markdown

    pieces = list("<>!/-[]&#;='\" \n\tabcxyzSCRIPT:`*$") + [
        "<script>", "</script>", "<!--", "-->", "<![CDATA[", "]]>", "<!", "<?", "javascript:", "onerror=", "<svg",
        "<a href=", "<img src=x ", "<iframe>", "jav&#x61;", "<scr", "ipt>", "](", "[x]", "    ", "\n\n"]
    rng = random.Random(12)
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 50)))
        rendered = _render_markdown(safe_markdown(text))
        assert active_content(rendered, [e for e in ACTIVE_ELEMENTS if e not in ("svg", "math")], images=False) == [], text
        assert active_content(clean_page("<html><head></head><body>" + rendered + "</body></html>")) == [], text


def test_the_notebooks_own_markdown_is_left_exactly_as_written():
    from grader.safehtml import safe_markdown

    from conftest import RELEASE

    cells = [c for path in sorted(SOLUTIONS.glob("*.ipynb")) + sorted(RELEASE.glob("*.ipynb"))
             for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]
    assert len(cells) > 100
    changed = [src[:80] for src in ("".join(c["source"]) for c in cells) if safe_markdown(src) != src]
    assert changed == []


def test_markdown_keeps_honest_text_and_maths_as_written():
    from grader.safehtml import clean_markdown

    honest = ("For $K<N$ and $x>0$ the bound holds; **bold**, `List<int>`, <b>bold</b>, <sub>i</sub>, "
              "[docs](https://pytorch.org/docs) and <https://arxiv.org/abs/1807.03748>, &lt; and &amp;.\n\n"
              "| a | b |\n|---|---|\n| 1 < 2 | 3 > 2 |\n")
    assert clean_markdown(honest) == honest
    svg = "<svg viewBox='0 0 10 10'><linearGradient id='g'></linearGradient><circle r='1'/></svg>"
    assert clean_markdown(svg) == svg   # SVG keeps its case (an <img src="data:image/svg+xml"> renders it)


def test_the_page_pass_keeps_the_template_head_and_honest_body():
    from grader.safehtml import clean_page

    page = ('<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8"/>\n<title>t</title>\n<style type="text/css">'
            "a > b { color: red }</style>\n<!-- MathJax -->\n"
            '<script src="https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js?config=TeX-AMS_CHTML-full,Safe">'
            ' </script>\n<script type="text/x-mathjax-config">init_mathjax = function() { if (a < b) {} };</script>\n'
            '<script>alert("not the template")</script>\n</head>\n<body>\n<div class="cell" id="cell-id=x">'
            '<pre><span class="ansi-red-fg">red</span> a &lt; b</pre><img src="data:image/png;base64,iVBORw0K" '
            'width="10"><a href="#top">top</a> $a&lt;b$</div></body></html>')
    out = clean_page(page)
    assert active_content(out) == []
    assert "a > b { color: red }" in out and "init_mathjax = function() { if (a < b) {} };" in out
    assert 'src="https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js?config=TeX-AMS_CHTML-full,Safe"' in out
    assert 'not the template' not in out
    assert '<span class="ansi-red-fg">red</span> a &lt; b' in out and 'src="data:image/png;base64,iVBORw0K"' in out
    assert '<a href="#top">top</a> $a&lt;b$' in out
    assert clean_page(out) == out


def test_outputs_keep_only_safe_mime_types():
    from grader.pageclean import strip_active

    nb = {"metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}}}},
          "cells": [{"cell_type": "code", "metadata": {"tags": ['x"><script>alert(1)</script>', "ok"]},
                     "source": "", "outputs": [
                         {"output_type": "display_data", "metadata": {},
                          "data": {"application/javascript": "alert(1)", "text/plain": "<Javascript object>"}},
                         {"output_type": "display_data", "metadata": {},
                          "data": {"application/vnd.jupyter.widget-view+json": {"model_id": "x"}}},
                         {"output_type": "display_data", "metadata": {"text/html": {"isolated": True}},
                          "data": {"text/html": "<b>hi</b><script>alert(1)</script>", "text/javascript": "alert(1)"}},
                         {"output_type": "display_data", "metadata": {"image/png": {"width": "1 onerror=alert(1)"}},
                          "data": {"image/png": 'iVBOR"><script>alert(1)</script>'}},
                         {"output_type": "display_data", "metadata": {"image/png": {"width": 200}},
                          "data": {"image/png": "iVBORw0KGgo=\n"}},
                     ]}]}
    outs = strip_active(nb)["cells"][0]["outputs"]
    assert nb["metadata"].get("widgets") is None
    assert nb["cells"][0]["metadata"]["tags"] == ["ok"]
    assert [sorted(o["data"]) for o in outs] == [["text/plain"], ["text/plain"], ["text/html"], ["text/plain"],
                                                 ["image/png"]]
    assert outs[2]["data"]["text/html"] == "<b>hi</b>" and outs[2]["metadata"] == {}
    assert outs[4]["metadata"] == {"image/png": {"width": 200}}
    assert "not shown" in outs[1]["data"]["text/plain"]


# ----------------------------------------------------------------------------- feedback, end to end
MARKDOWN_ANSWER = ("My answer, with maths $K<N$ kept.\n\n" + "\n\n".join(HOSTILE_MARKDOWN + REMOTE_MARKDOWN + HONEST_HTML))


def _gid(cell):
    return ((cell.get("metadata") or {}).get("nbgrader") or {}).get("grade_id")


def _hostile_autograded(release: dict) -> dict:
    nb = copy.deepcopy(release)
    next(c for c in nb["cells"] if _gid(c) == "answer_a")["source"] = MARKDOWN_ANSWER
    nb["cells"].append({"cell_type": "raw", "metadata": {"raw_mimetype": "text/html"},
                        "source": "<script>alert('raw')</script><p>raw cell</p>"})
    nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "![a](attachment:a.html) ![b](attachment:b.png)",
                        "attachments": {"a.html": {"text/html": "<script>alert(1)</script>"},
                                        "b.png": {"image/png": "iVBORw0KGgo="}}})
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
    cell["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": "plain output <script>alert('stream')</script>\n"},
        {"output_type": "display_data", "metadata": {},
         "data": {"application/javascript": "alert('js')", "text/plain": "<IPython.core.display.Javascript object>"}},
        {"output_type": "display_data", "metadata": {},
         "data": {"text/html": "<b>html output</b>" + "".join(HOSTILE_HTML + HONEST_HTML), "text/plain": "<HTML>"}},
        {"output_type": "display_data", "metadata": {},
         "data": {"text/markdown": "markdown output [x](javascript:alert(1)) <img src=x onerror=alert(1)>"}},
        {"output_type": "display_data", "metadata": {},
         "data": {"image/svg+xml": "<svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'><script>alert(1)</script></svg>"}},
        {"output_type": "display_data", "metadata": {"image/png": {"width": "1 onerror=alert(1)"}},
         "data": {"image/png": 'iVBOR"><script>alert(1)</script>'}},
        {"output_type": "display_data", "metadata": {"text/html": {"isolated": True}},
         "data": {"text/html": "<script>alert('isolated')</script>"}},
    ]
    return nb


def _judge_json(points_per_cell: dict[str, float], failed: str) -> dict:
    from grader.judge import load_cases

    cases = [{"cell": c.cell, "case": c.probe, "passed": c.cell != failed,
              "message": "" if c.cell != failed else "wrong value <script>alert('msg')</script>"}
             for c in load_cases(STEM) if c.cell in points_per_cell]
    points = {cell: (0.0 if cell == failed else pts) for cell, pts in points_per_cell.items()}
    return {"score": sum(points.values()), "max_score": sum(points_per_cell.values()), "points": points,
            "cases": cases, "not_run": [], "definition_errors": []}


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """One feedback run: 'hostile' (an executed notebook full of active content), 'died' and
    'stalled' (no executed copy: the kernel died / the full run timed out; 'stalled' has a status
    file from before the judge's reports were stored in it)."""
    from nbgrader.api import Gradebook

    from grader import ASSIGNMENT
    from fixtures import scratch_course
    from grader.course import COURSE_ID
    from grader.feedback import feedback
    from grader.judge import points_per_test_cell
    from grader.mutants import student_copy

    course, release, solution = scratch_course(tmp_path_factory.mktemp("feedback-safety"), SOLUTIONS / f"{STEM}.ipynb")
    with warnings.catch_warnings(), Gradebook(course.db_url, COURSE_ID) as gb:
        warnings.simplefilter("ignore")
        for student in ("hostile", "died", "stalled"):
            gb.update_or_create_student(student)
            gb.add_submission(ASSIGNMENT, student)
    hostile = _hostile_autograded(release)
    for kind in ("submitted", "autograded"):
        course.folder(kind, "hostile").mkdir(parents=True)
        (course.folder(kind, "hostile") / f"{STEM}.ipynb").write_text(json.dumps(hostile))
    submitted = student_copy(release, solution)
    next(c for c in submitted["cells"] if _gid(c) == "answer_a")["source"] = MARKDOWN_ANSWER
    test = next(c for c in submitted["cells"] if _gid(c) == "test_nce_loss")
    test["source"] = "# the student emptied this test cell"
    test["outputs"] = [{"output_type": "display_data", "metadata": {}, "data": {"application/javascript": "alert(1)"}}]
    points = points_per_test_cell(release)
    reasons = {"died": f"{STEM}: the kernel died in the full run (os._exit, a crash, or the 3 GB memory cap); "
                       "look at it by hand",
               "stalled": f"{STEM}: a cell ran past 20 s and ignored the interrupt; the full run stopped there"}
    for student, status, failed in (("died", "kernel died", "test_cosine_scores"), ("stalled", "timed out", "test_nce_loss")):
        course.folder("submitted", student).mkdir(parents=True)
        (course.folder("submitted", student) / f"{STEM}.ipynb").write_text(json.dumps(submitted))
        judged = _judge_json(points, failed)
        entry = {"status": status, "reasons": [reasons[student], "edited locked cell test_nce_loss (restored)"],
                 "judge": judged, "score": judged["score"], "max_score": judged["max_score"]}
        if student == "died":   # what autograde writes now
            from grader.judge import CaseResult, Verdict

            says = {c.probe: c.says for c in _cases(points)}
            verdict = Verdict(STEM, judged["points"], points,
                              [CaseResult(c["cell"], c["case"], says[c["case"]], 1.0, c["passed"], c["message"])
                               for c in judged["cases"]])
            entry["reports"] = {cell: verdict.cell_report(cell) for cell in points}
            entry["full_run_reason"] = reasons[student]
        course.write_json("status", student, {"student": student, "status": status, "reason": reasons[student],
                                              "notebooks": {STEM: entry}})
    done, problems = feedback(course)
    read = {s: (course.folder("feedback", s) / f"{STEM}.html") for s in ("hostile", "died", "stalled")}
    return {"course": course, "done": done, "problems": problems,
            "pages": {s: p.read_text() if p.exists() else None for s, p in read.items()}}


def _cases(points):
    from grader.judge import load_cases

    return [c for c in load_cases(STEM) if c.cell in points]


def test_the_pages_are_the_same_rendered_by_several_processes(pages, monkeypatch):
    """`feedback --workers`: the class split over nbgrader processes (here one student each) gets the pages
    one process wrote, byte for byte, and the same problems."""
    import grader.feedback

    from grader.feedback import feedback, feedback_workers

    assert feedback_workers(None, 1) == 1 and feedback_workers(8, 20) == 3 and feedback_workers(2, 100) == 2
    monkeypatch.setattr(grader.feedback, "STUDENTS_PER_RENDERER", 1)
    course = pages["course"]
    done, problems = feedback(course, workers=3)
    assert (done, problems) == (pages["done"], pages["problems"])
    for student, page in pages["pages"].items():
        assert (course.folder("feedback", student) / f"{STEM}.html").read_text() == page, student


def test_a_page_for_everyone_and_no_active_content(pages):
    assert pages["done"] == {"hostile": [STEM], "died": [STEM], "stalled": [STEM]}, pages["problems"]
    for student, page in pages["pages"].items():
        assert active_content(page) == [], f"{student}: {active_content(page)[:5]}"
        assert "cdnjs.cloudflare.com/ajax/libs/mathjax" in page, f"{student}: MathJax gone"
        assert "\\mathcal{L}_\\text{InfoNCE}" in page, f"{student}: the task text's maths is gone"
        assert "My answer, with maths" in page, f"{student}: the answer is gone"   # (shown as text if need be)


def test_the_hostile_page_still_shows_honest_output(pages):
    page = pages["pages"]["hostile"]
    assert "plain output" in page and "<b>html output</b>" in page and "markdown output" in page
    assert "raw cell" in page
    assert 'src="data:image/png;base64,iVBORw0KGgo="' in page      # the attachment that is an image
    for tag, name, value in _attributes("".join(HONEST_HTML)):   # styled answers and outputs keep their looks
        assert f'{name}="{html.escape(value)}"' in page, (tag, name, value)
    assert "tracker.example" not in page


@pytest.mark.parametrize("student, status, failed", [("died", "kernel died", "test_cosine_scores"),
                                                     ("stalled", "timed out", "test_nce_loss")])
def test_a_failed_full_run_gets_the_judges_report_and_a_note(pages, student, status, failed):
    page = pages["pages"][student]
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert "could not be run to the end" in text and f"({status}:" in text
    assert ("the kernel died in the full run" if student == "died" else "ignored the interrupt") in text
    assert "edited locked cell" not in text              # the note says why it was not run, nothing else
    for case in _cases({failed: 1}):
        assert f"[FAIL] {case.says}" in text, case.says
    assert "[PASS] equal scores give log(K+1)" in text   # a case of another cell
    assert "wrong value" in text
    assert "the student emptied this test cell" not in text   # locked cells as released


def test_the_leak_check_covers_pages_of_failed_runs(pages, monkeypatch):
    """A judge line in a page built from a submitted notebook withholds that page and is reported for that
    student; the same line typed by the student in their own submission is theirs to see."""
    import grader.feedback
    import grader.pageclean

    course = pages["course"]
    judge_line = "the judge's own line that no page may show"
    monkeypatch.setattr(grader.pageclean, "judge_lines", lambda stem: [judge_line] if stem == STEM else [])
    nb_path = course.folder("submitted", "died") / f"{STEM}.ipynb"
    original = nb_path.read_text()
    page = course.folder("feedback", "died") / f"{STEM}.html"
    try:
        # The page shows the line, the submission does not hold it: the pack leaked it.
        monkeypatch.setattr(grader.feedback, "sanitise", lambda nb, _real=grader.feedback.sanitise: _add_line(
            _real(nb), judge_line))
        done, problems = grader.feedback.feedback(course, ["died"])
        assert not page.exists() and STEM not in done.get("died", [])
        assert any("line(s) of the judge's code" in p for p in problems["died"]), problems
        # The student typed it themselves: their page is written.
        nb = json.loads(original)
        next(c for c in nb["cells"] if _gid(c) == "answer_c")["source"] = judge_line
        nb_path.write_text(json.dumps(nb))
        done, problems = grader.feedback.feedback(course, ["died"])
        assert page.exists() and STEM in done["died"], problems
    finally:
        nb_path.write_text(original)


def _add_line(nb: dict, line: str) -> dict:
    nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": line})
    return nb

# ----------------------------------------------------------------------------- no answer holds the class up
#: Markup html.parser cannot finish, each of which used to make it rescan the rest of the text from every
#: ``<`` (issue "Fair to the last point", item 6: 80 kB of ``<a b`` took 54 s of grader time), with and
#: without a ``>`` at the very end (which makes everything before it parseable again).
STALLERS = ["<a b", "<a b>", "<!--x>", "<![cdata[x>", "<![if x>", "<script>", "<a b='>", "</b<b>", "<a<a"]
#: An honest answer's mix of text, maths, tags, links and entities, to compare with.
BENIGN = "For $K<N$ the <b>loss</b> is *low*; see [docs](https://x.org), `List<int>`, <i>a</i> &lt; b.\n\n"


def _sized(piece: str, size: int) -> str:
    return (piece * (size // len(piece) + 1))[:size]


def _seconds(clean, text: str) -> float:
    """The best of two timings (the machine is shared)."""
    import time

    best = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        clean(text)
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.parametrize("piece", STALLERS)
@pytest.mark.parametrize("end", ["", ">"])
def test_unfinished_markup_costs_what_an_honest_answer_of_its_size_does(piece, end):
    """80 kB of each staller (and 1 MB of ``<a b`` and ``<a b>``) through every cleaner: under 20 times
    the time of an honest answer of the same size, measured here, side by side (no absolute times)."""
    from grader.safehtml import clean_fragment, clean_markdown, clean_page, safe_markdown

    sizes = [80_000, 1_000_000] if piece in ("<a b", "<a b>") else [80_000]
    for size in sizes:
        hostile, benign = _sized(piece, size - len(end)) + end, _sized(BENIGN, size)
        for clean in (clean_fragment, clean_markdown, clean_page) + ((safe_markdown,) if size < 100_000 else ()):
            slow, fast = _seconds(clean, hostile), _seconds(clean, benign)
            assert slow < 20 * max(fast, 0.005), (clean.__name__, size, round(slow, 3), round(fast, 4))


STALLING_AND_ACTIVE = [
    "<a b" * 20_000 + "<img src=x onerror=alert(1)",
    "<a b" * 20_000 + "<script>alert(1)</script>",
    "<a b" * 20_000 + '><a href="javascript:alert(1)">x</a>',
    "<!--x>" * 10_000 + "<script>alert(1)</script><!--",
    "<script>" * 5_000 + "<img src=x onerror=alert(1)>",
    "<![cdata[x>" * 5_000 + "<svg onload=alert(1)>",
    "<a b='>" * 10_000 + "<iframe src=https://example.org/></iframe>",
]


@pytest.mark.parametrize("text", STALLING_AND_ACTIVE, ids=range(len(STALLING_AND_ACTIVE)))
def test_the_fast_path_keeps_every_guarantee(text):
    from grader.safehtml import clean_fragment, clean_page, safe_markdown

    assert active_content(clean_fragment(text)) == []
    assert active_content(clean_page("<html><head></head><body>" + text + "</body></html>")) == []
    assert active_content(_render_markdown(safe_markdown("My answer: " + text + " (end)"))) == []


def test_past_its_time_budget_a_cleaner_shows_the_input_as_text(monkeypatch):
    import grader.safehtml as safehtml

    monkeypatch.setattr(safehtml, "CLEAN_SECONDS", -1.0)   # every budget already spent
    text = "<b>kept as text</b><script>alert(1)</script><img src=x onerror=alert(1)>"
    assert safehtml.clean_fragment(text) == html.escape(text)
    assert safehtml.clean_markdown(text) == html.escape(text)
    assert active_content(_render_markdown(safehtml.safe_markdown(text))) == []
    page = safehtml.clean_page("<!DOCTYPE html><html><head></head><body>" + text + "</body></html>")
    assert "took too long" in page and html.escape(text) in page and active_content(page) == []


def test_an_answer_over_the_cap_is_cut_with_a_note():
    from grader.safehtml import CELL_CAP, clean_fragment, safe_markdown

    answer = "honest words, " * 100_000                     # 1.4 MB
    out = safe_markdown(answer)
    assert out.startswith(answer[:CELL_CAP]) and out.rstrip().endswith(
        f"[answer cut at {CELL_CAP // 1000} kB for the feedback page]")
    assert safe_markdown(out) == out                        # cut once
    assert safe_markdown(answer[:CELL_CAP]) == answer[:CELL_CAP]   # at the cap: whole
    assert f"[HTML cut at {CELL_CAP // 1000} kB for the feedback page]" in clean_fragment("<p>" + answer)


def _with_answer(nb: dict, text: str) -> dict:
    nb = copy.deepcopy(nb)
    next(c for c in nb["cells"] if _gid(c) == "answer_a")["source"] = text
    return nb


def test_a_notebook_with_a_staller_costs_the_grader_what_an_honest_one_does():
    """What autograde (strip_active_outputs, for formgrader's copy) and feedback (strip_active) do to every
    notebook, on the issue's 80 kB ``<a b`` answer and on an honest answer of the same size."""
    from grader.pageclean import strip_active, strip_active_outputs

    solution = json.loads((SOLUTIONS / f"{STEM}.ipynb").read_text())
    hostile, benign = _with_answer(solution, "<a b" * 20_000), _with_answer(solution, _sized(BENIGN, 80_000))
    for strip in (strip_active, strip_active_outputs):
        slow = _seconds(lambda nb: strip(copy.deepcopy(nb)), hostile)
        fast = _seconds(lambda nb: strip(copy.deepcopy(nb)), benign)
        assert slow < 20 * max(fast, 0.005), (strip.__name__, round(slow, 3), round(fast, 4))


@pytest.fixture(scope="module")
def stalled_class(tmp_path_factory):
    """One feedback run for alice and bob (the model answer) and 'staller' (80 kB of ``<a b`` as a written
    answer, 1 MB of ``<a b>`` in a markdown cell of its own), then one for alice alone, each timed."""
    import time

    from nbgrader.api import Gradebook

    from grader import ASSIGNMENT
    from fixtures import scratch_course
    from grader.course import COURSE_ID
    from grader.feedback import feedback
    from grader.mutants import student_copy

    course, release, solution = scratch_course(tmp_path_factory.mktemp("feedback-staller"), SOLUTIONS / f"{STEM}.ipynb")
    honest = student_copy(release, solution)
    staller = _with_answer(honest, "My answer: " + "<a b" * 20_000)
    staller["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "<a b>" * 200_000})
    with warnings.catch_warnings(), Gradebook(course.db_url, COURSE_ID) as gb:
        warnings.simplefilter("ignore")
        for student in ("alice", "bob", "staller"):
            gb.update_or_create_student(student)
            gb.add_submission(ASSIGNMENT, student)
    for student, nb in (("alice", honest), ("bob", honest), ("staller", staller)):
        for kind in ("submitted", "autograded"):
            course.folder(kind, student).mkdir(parents=True)
            (course.folder(kind, student) / f"{STEM}.ipynb").write_text(json.dumps(nb))
    started = time.perf_counter()
    done, problems = feedback(course)
    with_staller = time.perf_counter() - started
    page = lambda s: (course.folder("feedback", s) / f"{STEM}.html").read_text()   # noqa: E731
    pages = {s: page(s) for s in ("alice", "bob", "staller") if STEM in done.get(s, [])}
    started = time.perf_counter()
    feedback(course, ["alice"])
    alone = time.perf_counter() - started
    return {"done": done, "problems": problems, "pages": pages, "with_staller": with_staller, "alone": alone,
            "alice_alone": page("alice")}


def test_a_staller_in_the_class_holds_nobody_up(stalled_class):
    done, pages = stalled_class["done"], stalled_class["pages"]
    print(f"feedback: alice, bob and the staller in {stalled_class['with_staller']:.1f} s, alice alone in "
          f"{stalled_class['alone']:.1f} s")
    assert done == {"alice": [STEM], "bob": [STEM], "staller": [STEM]}, stalled_class["problems"]
    # three pages cost about three times one: no student's answer is worth minutes of the grader
    assert stalled_class["with_staller"] < 4 * stalled_class["alone"], (stalled_class["with_staller"],
                                                                        stalled_class["alone"])
    assert pages["alice"] == stalled_class["alice_alone"]   # the same page as without the staller
    for student in ("alice", "bob"):
        assert "cut at" not in pages[student] and "took too long" not in pages[student]
    staller = pages["staller"]
    assert active_content(staller) == [] and "My answer:" in staller
    assert "[answer cut at 200 kB for the feedback page]" in staller
