"""Command line for TAs: ``python -m grader <verb>`` from the repository root.

Verbs:
  release              regenerate notebooks/ex01 (the student release) from solutions/ex01 (--assignment NAME:
                       solutions/NAME to notebooks/NAME)
  bundle               write build/bundle/ex01-student/ and its zip: what a lecturer hands out
                       (release notebooks, utils/, data/, its own README, packaging and pack.sh)
  collect PATH         import submissions (zips named by student id, student folders,
                       <student>__<notebook>.ipynb files, or a Canvas / Moodle bulk download) into
                       grading/submitted/, with each submission's time (--times CSV, else the files');
                       --deadline ISO8601+zone and --late-penalty none|zero|per-hour:P for export
  autograde            grade everyone (or --student ID), --workers N in parallel, each notebook in
                       a sandboxed session with a per-cell timeout and a memory cap; run it again after
                       a crash to resume (students graded with the same inputs are skipped; --regrade);
                       --shard I/N (or auto: a Slurm array or Kubernetes Indexed Job task) grades one
                       shard of the class into grading/shards/I-of-N/
  merge-shards [DIRS]  merge the shards' gradebooks, status files and autograded notebooks into grading/
                       (refuses shards of other seeds or assignments; names the students missing)
  export               grading/grades.csv: one row per student with status and reason, submission
                       time, minutes late and late penalty; --lms canvas|moodle --roster R --to FILE
                       also writes the LMS's grade import CSV (grader/extras/lms/), refusing provisional grades
  similarity           pairwise similarity of the students' answer cells (code and written answers;
                       the release's given code and the solution do not count): HTML report + CSV under
                       grading/similarity/; reports only, never changes points
  feedback             grading/feedback/<student>/ex01/*.html, hidden tests removed; --zip canvas|moodle
                       also packs them for the LMS's bulk feedback upload
  backup / restore F   copy nbgrader's gradebook to grading/backups/ / put a copy back
  mutants              judge the plausible wrong answers in grader/mutants/ over 20 seeds
                       and report the kill rate per notebook
  tiers [FOLDER]       the core proxy (solution lines and written answers, core and extensions) and the
                       rubric problems of every source notebook; exits 1 over the limits (grader/extras/tiers.py)

Statuses (grades.csv, worst first): unreadable (0 points) | kernel died | timed out | tampered (test or
locked cells edited, deleted or invented: the judge ignores them) | review (the static audit flagged code
for a TA) | graded. Every verb exits non-zero only when the run itself failed, never because a student did
(mutants: also when a mutant survives, i.e. a hidden test is too weak).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


from .course import table  # noqa: E402 - the summary tables every verb prints
from .policy import Settings  # noqa: E402 - the defaults of autograde's limits, written once there


def _course(args):
    from .course import Course

    kwargs = {}
    if args.grading_dir:
        kwargs["grading"] = Path(args.grading_dir)
    if args.source:
        kwargs["source"] = Path(args.source)
    if args.assignment:
        kwargs["assignment"] = args.assignment
    return Course(**kwargs)


def _count(values) -> str:
    counts = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def cmd_release(args) -> int:
    from .release import generate_release

    dest = generate_release(assignment=_course(args).assignment)
    names = sorted(p.name for p in dest.glob("*.ipynb"))
    print(table([[n, "ok"] for n in names], ["notebook", "hidden tests / solutions leaked"]))
    print(f"released {len(names)} notebooks to {dest} (checked: no solution or hidden-test markers)")
    return 0


def cmd_bundle(args) -> int:
    from .extras.bundle import build_bundle, bundle_urls, load_config

    config = load_config()
    folder, archive = build_bundle(Path(args.out) if args.out else None, pack_url=args.pack_url,
                                   colab_url=args.colab_url, config=config)
    files = [p for p in folder.rglob("*") if p.is_file()]
    url, colab = bundle_urls(config, args.pack_url, args.colab_url)
    print(f"bundle: {folder} ({len(files)} files; checked: no solution block in any file)")
    print(f"zip:    {archive} ({archive.stat().st_size / 1e6:.1f} MB)")
    print(f"pack URL in every setup cell: {url or '(none: pack_url in grader/extras/bundle.toml, or --pack-url)'}")
    print(f"Open in Colab links in the student README: {colab or '(none: pass --colab-url https://github.com/ORG/REPO/blob/BRANCH)'}")
    print(f"lecturer's notes (where to publish what): {archive.parent / 'LECTURER.md'}")
    return 0


def cmd_collect(args) -> int:
    from .collect import collect

    course = _course(args)
    results = collect(course, Path(args.path), times=[Path(t) for t in args.times or []],
                      deadline=args.deadline, late_penalty=args.late_penalty, grace=args.grace,
                      extensions=Path(args.extensions) if args.extensions else None)
    rows = [[r.student, r.lms.get("name", "") if r.lms else "", len(r.notebooks),
             "UNREADABLE" if r.unreadable else "ok", "; ".join(r.problems) or "-"] for r in results]
    print(table(rows, ["student", "name", "notebooks", "state", "problems"]))
    students, strays = [r for r in results if not r.stray], [r for r in results if r.stray]
    print(f"collected {sum(not r.unreadable for r in students)} of {len(students)} submissions into "
          f"{course.grading / 'submitted'}; every file each student handed in is accounted for in "
          f"{course.grading / 'collect'}/<student>.json ('files')")
    unreadable = [r.student for r in students if r.unreadable]
    if unreadable:
        print(f"UNREADABLE ({len(unreadable)}), fix by hand and collect again: {', '.join(unreadable)}")
    if strays:
        print(f"belonging to no student ({len(strays)}): " + "; ".join(r.problems[0][len('ignored '):] for r in strays))
    timed = [r for r in students if r.submitted_at]
    if students:
        sources = _count(r.time_source.split(" (")[0] for r in timed)
        print(f"submission times: {len(timed)} of {len(students)}" + (f" ({sources})" if timed else "")
              + ("; no time for: " + ", ".join(r.student for r in students if not r.submitted_at)
                 if len(timed) < len(students) else ""))
    return 0


def cmd_autograde(args) -> int:
    from .autograde import autograde

    course = _course(args)
    settings = Settings(workers=args.workers, cell_timeout=args.timeout, notebook_timeout=args.notebook_timeout,
                        judge_budget=args.judge_budget, mem_gb=args.mem_gb, sandbox=args.sandbox, session_threads=args.session_threads,
                        full_run=args.full_run)
    if not course.students():
        print(f"no submissions under {course.grading / 'submitted'}: run `python -m grader collect PATH` first",
              file=sys.stderr)
        return 1
    if args.sandbox == "bwrap" and not settings.protections()["bwrap"]:
        print("--sandbox bwrap: bubblewrap is not usable here (not installed, or user namespaces are blocked)",
              file=sys.stderr)
        return 1
    started = time.monotonic()
    target, students, shard = course, args.student or None, None
    if args.shard:
        from .extras.shards import parse_shard, prepare_shard

        index, count, where = parse_shard(args.shard)
        root = Path(args.shard_dir) if args.shard_dir else None
        target, students = prepare_shard(course, index, count, root, args.student, settings)
        shard = f"shard {index}/{count}"
        print(f"{shard} (from {where}): {len(students)} of {len(course.students())} students, graded into {target.grading}")
    summary: dict = {}
    statuses = autograde(target, students, settings, regrade=args.regrade, summary=summary, bar=True) if students != [] else {}
    rows = [[s, st["status"], f"{st['score']:g}/{st['max_score']:g}", st["reason"] or "-"]
            for s, st in sorted(statuses.items())]
    print(table(rows, ["student", "status", "autograded", "reason"]))
    seconds = time.monotonic() - started
    graded = summary.get("graded", 0)
    rate = (f" | {graded} graded now: {60 * graded / max(summary['seconds'], 1e-9):.1f} students per minute, "
            f"{summary['worker_seconds'] / graded:.0f} worker-seconds per student" if graded else "")
    print(f"{len(statuses)} students in {seconds:.0f} s with {settings.workers} worker(s): "
          f"{_count(st['status'] for st in statuses.values())}{rate}"
          + (f"; {summary['skipped']} graded before, skipped" if summary.get("skipped") else ""))
    if shard:
        print(f"{shard} done. When every shard is: python -m grader merge-shards"
              + (f" {Path(args.shard_dir).resolve()}" if args.shard_dir else "") + ", then python -m grader export")
    prot = next(iter(statuses.values()))["protections"] if statuses else settings.protections()
    off = [k for k in ("network", "filesystem", "memory") if not prot.get(k)]
    print("protections: " + ("all on (no network, isolated filesystem, memory cap)" if not off
                             else "OFF: " + ", ".join(off) + " (see grader/sandbox.py; install bubblewrap)"))
    return 0


def cmd_merge_shards(args) -> int:
    from .extras.shards import merge_shards

    course = _course(args)
    merged = merge_shards(course, [Path(d) for d in args.dirs] or None, allow_missing=args.allow_missing)
    rows = [[s, index] for index, names in sorted(merged.items()) for s in names]
    print(table(rows, ["student", "shard"]))
    print(f"merged {len(rows)} students from {len(merged)} shard(s) into {course.grading}: "
          "now `python -m grader export` (and feedback)")
    return 0


def cmd_export(args) -> int:
    from .extras.export import export

    course = _course(args)
    if args.lms and not (args.roster and args.to):
        print("--lms needs --roster (the LMS's own roster export) and --to (the LMS import file to write)", file=sys.stderr)
        return 1
    if args.grace is not None or args.extensions:
        from .extras.deadlines import save_settings

        save_settings(course, None, None, args.grace, Path(args.extensions) if args.extensions else None)
    out, rows = export(course, Path(args.to) if args.to and not args.lms else None,
                       deadline=args.deadline, late_penalty=args.late_penalty)

    def part(r, tier):   # e.g. "31/61" (autograded and manual points of the tier so far)
        return f"{r[tier + '_score']:g}/{r[tier + '_max']:g}" if r[tier + "_max"] != "" else "-"

    print(table([[r["student_id"], r["name"], r["status"], f"{r['autograded_score']:g}/{r['autograded_max']}",
                  "pending" if r["needs_manual_grade"] else f"{r['manual_score']:g}", part(r, "core"),
                  part(r, "extension"), r["reason"] or "-"] for r in rows],
                ["student", "name", "status", "autograded", "manual", "core", "extensions", "reason"]))
    print(f"wrote {len(rows)} rows to {out}: {_count(r['status'] for r in rows)}")
    late = [r for r in rows if r.get("minutes_late") not in ("", 0, "unknown")]
    unknown = [r["student_id"] for r in rows if r.get("minutes_late") == "unknown"]
    if late or unknown:
        print(f"late: {len(late)} (" + ", ".join(f"{r['student_id']} {r['minutes_late']} min, -{r['late_penalty']:g}"
                                                  for r in late) + ")"
              + (f"; NO SUBMISSION TIME (no penalty charged, check by hand or collect with --times): "
                 f"{', '.join(unknown)}" if unknown else ""))
    pending = [r["student_id"] for r in rows if r["needs_manual_grade"]]
    if pending:
        print(f"PROVISIONAL: {len(pending)} student(s) have written answers not graded yet (formgrader, Manual "
              f"Grading): {', '.join(pending)}")
    if args.lms:
        from .extras.lms import ExportOptions, ExportRefused, export_lms

        options = ExportOptions(column=args.lms_column or course.assignment, key=args.moodle_key, score=args.score,
                                scale_to=args.scale_to, provisional=args.provisional)
        try:
            done = export_lms(course, rows, args.lms, Path(args.roster), Path(args.to), options)
        except ExportRefused as exc:
            print(f"{args.lms}: NOT WRITTEN: {exc}", file=sys.stderr)
            return 1
        scale = f", scaled to {done.points_possible:g} points" if args.scale_to is not None else ""
        print(f"{args.lms}: wrote {done.rows} students to {done.path} (column '{done.column}', {args.score} "
              f"score{scale})")
        for note in done.notes:
            print(f"{args.lms}: {note}")
        if done.left_out:
            print(f"{args.lms}: LEFT OUT (not in the file, the LMS keeps what it has): {'; '.join(done.left_out)}")
        if done.not_in_roster:
            print(f"{args.lms}: NOT IN THE ROSTER (no grade written): {'; '.join(done.not_in_roster)}")
        if done.no_submission:
            print(f"{args.lms}: in the roster without a submission (not in the file): {', '.join(done.no_submission)}")
    return 0


def cmd_feedback(args) -> int:
    from .feedback import feedback

    course = _course(args)
    done, problems = feedback(course, args.student or None, workers=args.workers)
    rows = [[s, ", ".join(done.get(s, [])) or "-", "; ".join(problems.get(s, [])) or "-"]
            for s in sorted(set(done) | set(problems))]
    print(table(rows, ["student", "feedback pages", "problems"]))
    print(f"feedback for {len(done)} students in {course.grading / 'feedback'} (checked: no hidden test source)"
          + (f"; {len(problems)} with problems (see the table)" if problems else ""))
    if args.zip:
        from .extras.lms import feedback_zip

        out = Path(args.zip_to) if args.zip_to else course.grading / f"feedback-{args.zip}.zip"
        written, left_out = feedback_zip(course, args.zip, out)
        print(f"{args.zip}: {written} pages in {out}, named for the LMS's bulk feedback upload"
              + (f"; LEFT OUT: {'; '.join(left_out)}" if left_out else ""))
    return 0


def cmd_backup(args) -> int:
    from .extras.backup import backup

    course = _course(args)
    print(f"gradebook backed up to {backup(course, Path(args.to) if args.to else None)}")
    return 0


def cmd_restore(args) -> int:
    from .extras.backup import restore

    course = _course(args)
    db, previous = restore(course, Path(args.file))
    print(f"restored {args.file} into {db}" + (f"; the gradebook it replaced is in {previous}" if previous else ""))
    return 0


def cmd_similarity(args) -> int:
    from .extras.similarity import similarity

    course = _course(args)
    report = similarity(course, out=Path(args.out) if args.out else None, threshold=args.threshold,
                        top=args.top)
    rows = [[f"{p.a} / {p.b}", f"{100 * p.score:.0f} %", p.notebook_summary()] for p in report.pairs[:args.show]]
    print(table(rows, ["pair", "similarity", "where"]))
    print(f"{report.students} students, {report.compared} pairs compared in {report.seconds:.0f} s; "
          f"{report.flagged} pairs at or above {100 * args.threshold:.0f} %: {report.html} (and {report.csv}). "
          "A lead for a TA to read, not a verdict: no points change.")
    return 0


def cmd_mutants(args) -> int:
    from .mutants import notebooks_with_mutants, run

    stems = args.notebook or notebooks_with_mutants()
    started = time.monotonic()
    reports = run(stems, seeds=list(range(args.seeds)))
    rows = [[stem, r["total"], r["killed"], f"{100 * r['killed'] / max(1, r['total']):.0f} %",
             f"{r['baseline']:g}/{r['baseline_max']:g}", "; ".join(r["survivors"] + r["problems"]) or "-"]
            for stem, r in reports.items()]
    print(table(rows, ["notebook", "mutants", "killed", "kill rate", "solution", "survivors / problems"]))
    print(f"{time.monotonic() - started:.0f} s")
    bad = any(r["survivors"] or r["problems"] or r["baseline"] < r["baseline_max"] for r in reports.values())
    return 1 if bad else 0


def cmd_tiers(args) -> int:
    from .extras.tiers import main as tiers_main

    return tiers_main([args.folder] if args.folder else [])


def _deadline_extras(p) -> None:
    p.add_argument("--grace", type=float, metavar="MINUTES",
                   help="a submission this many minutes after the deadline (plus its extension) is on time; stored")
    p.add_argument("--extensions", metavar="CSV",
                   help="per-student extensions: columns student (the pack's or the LMS's id) and hours; stored "
                        "(nbgrader's gradebook extensions count too)")


def main(argv: list[str] | None = None) -> int:
    from .extras.lms import ADAPTERS

    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grading-dir", help="grading folder (default grading/ or $LAS_GRADING_DIR)")
    parser.add_argument("--source", help=argparse.SUPPRESS)  # another nbgrader source folder (tests)
    parser.add_argument("--assignment", help="the assignment to grade (default ex01 or $LAS_ASSIGNMENT): its notebooks "
                                             "are solutions/NAME, its grading folder grading/NAME/ (ex01: grading/)")
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("release", help="regenerate notebooks/ex01 from solutions/ex01")
    p = sub.add_parser("bundle", help="write the student bundle (folder and zip) under build/bundle")
    p.add_argument("--out", help="output folder (default build/bundle)")
    p.add_argument("--pack-url", help="URL or path of the zip for setup cells (default: grader/extras/bundle.toml)")
    p.add_argument("--colab-url", help="https://github.com/ORG/REPO/blob/BRANCH where you publish the bundle's folder "
                                       "and zip: Open in Colab links in its README, and the zip's link in the setup "
                                       "cells when no pack URL is set (default: grader/extras/bundle.toml)")
    p = sub.add_parser("collect", help="import submissions from a folder")
    p.add_argument("path")
    p.add_argument("--times", action="append",
                   help="the LMS's submission times: Canvas's Submissions API list (JSON; repeat for each page), "
                        "Moodle's grading worksheet, or a CSV of student, submitted_at (ISO 8601 with zone)")
    p.add_argument("--deadline", help="the deadline, ISO 8601 with a time zone (e.g. 2026-11-20T23:59:00+01:00); "
                                      "stored for export")
    p.add_argument("--late-penalty", help="none (default) | zero | per-hour:P, as nbgrader's LateSubmissionPlugin")
    _deadline_extras(p)
    p = sub.add_parser("autograde", help="grade all (or some) students")
    p.add_argument("--student", action="append", help="grade only this student (repeatable)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--timeout", type=int, default=Settings.cell_timeout,
                   help=f"seconds per cell of the full run and per judge case (default {Settings.cell_timeout})")
    p.add_argument("--notebook-timeout", type=int, default=Settings.notebook_timeout,
                   help=f"hard limit of one notebook's full run (default {Settings.notebook_timeout} s)")
    p.add_argument("--judge-budget", type=int, default=Settings.judge_budget,
                   help=f"one notebook's judge run: its top-level code and every case (default {Settings.judge_budget} s)")
    p.add_argument("--mem-gb", type=float, default=Settings.mem_gb,
                   help=f"memory cap of each student's grading session (default {Settings.mem_gb:g} GB)")
    p.add_argument("--session-threads", "--kernel-threads", dest="session_threads", type=int, default=0,
                   help="torch threads per grading session (default: CPU cores / workers; 1 on a machine shared with "
                        "other jobs); --kernel-threads is its older name")
    p.add_argument("--sandbox", choices=["auto", "bwrap", "unshare", "none"], default="auto")
    p.add_argument("--full-run", choices=["light", "full"], default="light",
                   help="light (default): the course's demonstration cells run only their definitions and show the "
                        "outputs the student submitted, test cells show the judge's report; full: every cell runs, "
                        "as in Jupyter (about 2.4x the grading time; points are the same)")
    p.add_argument("--regrade", action="store_true",
                   help="grade again students already graded with the same submission, assignment, seed and settings")
    p.add_argument("--shard", metavar="I/N|auto",
                   help="grade only shard I of N of the class (auto: from a Slurm job array or a Kubernetes Indexed Job)")
    p.add_argument("--shard-dir", help="folder of the shard folders (default grading/shards; shared storage on a cluster)")
    p = sub.add_parser("merge-shards", help="merge graded shards into the grading folder")
    p.add_argument("dirs", nargs="*", help="shard folders, or folders holding them (default grading/shards)")
    p.add_argument("--allow-missing", action="store_true",
                   help="merge the graded students even when some shard has not graded all of its own")
    p = sub.add_parser("export", help="write the grades CSV")
    p.add_argument("--to", help="CSV path (default grading/grades.csv); with --lms: the LMS import file")
    p.add_argument("--deadline", help="override collect's --deadline (ISO 8601 with a time zone)")
    p.add_argument("--late-penalty", help="override collect's --late-penalty (none | zero | per-hour:P)")
    _deadline_extras(p)
    p.add_argument("--lms", choices=sorted(ADAPTERS), help="also write this LMS's grade import CSV to --to")
    p.add_argument("--roster", help="the LMS's roster export (Canvas gradebook CSV; Moodle grading worksheet or "
                                    "participants CSV)")
    p.add_argument("--lms-column", help="the LMS's assignment column / grade item (default: the assignment's name)")
    p.add_argument("--moodle-key", default="email", choices=["email", "idnumber", "username"],
                   help="the Moodle identifier column (default email)")
    p.add_argument("--score", choices=["total", "core"], default="total",
                   help="the points sent: total (core + extensions, default) or core alone; late penalty taken off")
    p.add_argument("--scale-to", type=float, metavar="POINTS",
                   help="send score / maximum x POINTS (the LMS assignment's points possible)")
    p.add_argument("--provisional", choices=["refuse", "skip", "include"], default="refuse",
                   help="students with written answers not graded yet: refuse to write the file (default), skip "
                        "them (not in the file), or include their grade so far")
    p = sub.add_parser("similarity", help="similarity report of the students' answers (never changes points)")
    p.add_argument("--out", help="report folder (default grading/similarity)")
    p.add_argument("--threshold", type=float, default=0.5, help="flag pairs at or above this similarity (default 0.5)")
    p.add_argument("--top", type=int, default=100, help="pairs shown side by side in the HTML (default 100)")
    p.add_argument("--show", type=int, default=15, help="pairs printed here (default 15)")
    p = sub.add_parser("feedback", help="write feedback HTML")
    p.add_argument("--student", action="append")
    p.add_argument("--workers", type=int, default=0,
                   help="nbgrader processes rendering pages at once (default: the cores, at most 4; one per 8 students)")
    p.add_argument("--zip", choices=sorted(ADAPTERS),
                   help="also write every page into a zip named for this LMS's bulk feedback upload")
    p.add_argument("--zip-to", help="the zip's path (default grading/feedback-<lms>.zip)")
    p = sub.add_parser("backup", help="copy nbgrader's gradebook (manual grades, extensions) to grading/backups/")
    p.add_argument("--to", help="the copy's path (default grading/backups/gradebook-<UTC time>.db)")
    p = sub.add_parser("restore", help="put a gradebook backup back (the current one is backed up first)")
    p.add_argument("file")
    p = sub.add_parser("mutants", help="mutation-test the judge's cases")
    p.add_argument("--notebook", action="append", help="only this notebook stem (repeatable)")
    p.add_argument("--seeds", type=int, default=20, help="input seeds 0..N-1 (every mutant must lose on each)")
    p = sub.add_parser("tiers", help="core and extension lines, written answers and points; rubric problems")
    p.add_argument("folder", nargs="?", help="folder of source notebooks (default solutions/ex01)")
    for verb in sub.choices.values():   # also after the verb: python -m grader collect --assignment ex02 PATH
        verb.add_argument("--assignment", default=argparse.SUPPRESS, help="as before the verb")
    args = parser.parse_args(argv)
    if args.assignment:   # child processes (sandboxed sessions, Slurm tasks, nbgrader) grade the same assignment
        import os

        os.environ["LAS_ASSIGNMENT"] = args.assignment
    handler = {"release": cmd_release, "bundle": cmd_bundle, "collect": cmd_collect, "autograde": cmd_autograde,
               "merge-shards": cmd_merge_shards, "export": cmd_export, "similarity": cmd_similarity,
               "feedback": cmd_feedback, "backup": cmd_backup, "restore": cmd_restore, "mutants": cmd_mutants,
               "tiers": cmd_tiers}[args.verb]
    try:
        return handler(args)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - the run itself failed: say so in one line, exit non-zero
        print(f"python -m grader {args.verb}: the run failed: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
