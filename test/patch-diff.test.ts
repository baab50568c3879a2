// Unit tests of the unified-diff parser and the exact hunk applier (byte-level behaviour).
import { describe, expect, it } from "vitest";
import { parsePatch } from "../src/patch/diff.js";
import { applyFileDiff } from "../src/patch/hunks.js";
import { PatchError } from "../src/patch/errors.js";

const apply = (patch: string, content: string | null, idx = 0) =>
  applyFileDiff(parsePatch(patch, "t.patch").files[idx], content);

describe("parsePatch", () => {
  it("takes the header, several files and hunks, and defaults omitted counts to 1", () => {
    const p = parsePatch(
      [
        "What: two files.",
        "Why: tests.",
        "",
        "diff --git a/sglang/a.py b/sglang/a.py",
        "index 123..456 100644",
        "--- a/sglang/a.py\t2024-01-01 00:00:00",
        "+++ b/sglang/a.py",
        "@@ -1 +1 @@",
        "-x",
        "+y",
        "@@ -5,2 +5,3 @@ def f():",
        " a",
        "+b",
        " c",
        "--- a/sglang/b.py",
        "+++ b/sglang/b.py",
        "@@ -1,0 +2 @@",
        "+new",
        "",
      ].join("\n"),
      "t.patch",
    );
    expect(p.header).toBe("What: two files.\nWhy: tests.");
    expect(p.files.map((f) => [f.path, f.kind, f.hunks.length])).toEqual([
      ["sglang/a.py", "modify", 2],
      ["sglang/b.py", "modify", 1],
    ]);
    expect(p.files[0].hunks[0]).toMatchObject({
      oldStart: 1,
      oldCount: 1,
      newCount: 1,
      oldLines: ["x\n"],
      newLines: ["y\n"],
    });
    expect(p.files[0].hunks[1]).toMatchObject({
      oldLines: ["a\n", "c\n"],
      newLines: ["a\n", "b\n", "c\n"],
    });
  });

  it("reports malformed patches with the line number", () => {
    const bad = (text: string, re: RegExp) => {
      try {
        parsePatch(text, "x.patch");
        throw new Error("no error");
      } catch (err) {
        expect(err).toBeInstanceOf(PatchError);
        expect((err as PatchError).code).toBe("malformed");
        expect((err as Error).message).toMatch(re);
      }
    };
    bad(
      "--- a/sglang/a.py\n+++ b/sglang/a.py\n@@ -1,2 +1,2 @@\n x\n?y\n",
      /^x\.patch:5: hunk @@ -1,2 \+1,2 @@ ends early/,
    );
    bad("--- a/sglang/a.py\n+++ b/sglang/a.py\n@@ -1,3 +1,3 @@\n x\n", /^x\.patch:4: .*truncated/);
    bad("--- a/sglang/a.py\n+++ b/sglang/a.py\n@@ -x +1 @@\n", /^x\.patch:3: bad hunk header/);
    bad(
      "--- a/other/a.py\n+++ b/other/a.py\n@@ -1 +1 @@\n-x\n+y\n",
      /^x\.patch:1: .*inside the sglang package/,
    );
    bad(
      "--- a/sglang/../../etc/passwd\n+++ b/sglang/../../etc/passwd\n@@ -1 +1 @@\n-x\n+y\n",
      /^x\.patch:1:/,
    );
    bad("just words\n", /no file diffs found/);
    bad("--- a/sglang/a.py\n+++ b/sglang/b.py\n@@ -1 +1 @@\n-x\n+y\n", /renames are not supported/);
  });
});

describe("applyFileDiff", () => {
  it("applies several hunks exactly and reports offsets", () => {
    const file = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
    const patch =
      "--- a/sglang/f\n+++ b/sglang/f\n@@ -2,2 +2,2 @@\n 2\n-3\n+three\n@@ -7,2 +7,3 @@\n 7\n+7.5\n 8\n";
    const r = apply(patch, file);
    expect(r.ok && r.content).toBe("1\n2\nthree\n4\n5\n6\n7\n7.5\n8\n9\n");
    // Two lines inserted at the top: both hunks land at offset +2.
    const r2 = apply(patch, `a\nb\n${file}`);
    expect(r2.ok).toBe(true);
    if (r2.ok) expect(r2.hunks.map((h) => h.offset)).toEqual([2, 2]);
  });

  it("reports the first mismatching line, never fuzzes", () => {
    const r = apply(
      "--- a/sglang/f\n+++ b/sglang/f\n@@ -2,3 +2,3 @@\n 2\n-3\n+three\n 4\n",
      "1\n2\n3\nFOUR\n5\n",
    );
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.conflict).toMatchObject({ hunk: 1, line: 4, expected: "4\n", found: "FOUR\n" });
      expect(r.conflict.message).toMatch(
        /hunk #1 @@ -2,3 \+2,3 @@ does not apply: line 4: expected "4", found "FOUR"/,
      );
    }
  });

  it("handles '\\ No newline at end of file' on either side", () => {
    const add =
      "--- a/sglang/f\n+++ b/sglang/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n";
    expect(apply(add, "a\nb")).toMatchObject({ ok: true, content: "a\nb\n" });
    // The same patch does not apply when the file already ends with a newline.
    expect(apply(add, "a\nb\n").ok).toBe(false);
    const drop =
      "--- a/sglang/f\n+++ b/sglang/f\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n\\ No newline at end of file\n";
    expect(apply(drop, "a\nb\n")).toMatchObject({ ok: true, content: "a\nc" });
    const ctx =
      "--- a/sglang/f\n+++ b/sglang/f\n@@ -1,2 +1,3 @@\n+z\n a\n b\n\\ No newline at end of file\n";
    expect(apply(ctx, "a\nb")).toMatchObject({ ok: true, content: "z\na\nb" });
    // A diff that adds lines after a context line without newline is refused, not merged.
    const broken =
      "--- a/sglang/f\n+++ b/sglang/f\n@@ -1,2 +1,3 @@\n a\n b\n\\ No newline at end of file\n+c\n";
    const r = apply(broken, "a\nb");
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.conflict.message).toMatch(/line 2 without a newline in the middle/);
  });

  it("keeps CR bytes: CRLF files patch with CRLF diffs, and a LF diff does not match a CRLF file", () => {
    const crlfPatch = "--- a/sglang/f\n+++ b/sglang/f\n@@ -1,3 +1,3 @@\n a\r\n-b\r\n+B\r\n c\r\n";
    expect(apply(crlfPatch, "a\r\nb\r\nc\r\n")).toMatchObject({
      ok: true,
      content: "a\r\nB\r\nc\r\n",
    });
    const lfPatch = "--- a/sglang/f\n+++ b/sglang/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n";
    const r = apply(lfPatch, "a\r\nb\r\nc\r\n");
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.conflict.message).toMatch(/line endings differ/);
    // A patch file saved with CRLF throughout (headers included).
    const allCrlf = crlfPatch.replace(/\n/g, "\r\n").replace(/\r\r\n/g, "\r\n");
    expect(apply(allCrlf, "a\r\nb\r\nc\r\n")).toMatchObject({
      ok: true,
      content: "a\r\nB\r\nc\r\n",
    });
  });

  it("creates and deletes files", () => {
    const create = "--- /dev/null\n+++ b/sglang/new.py\n@@ -0,0 +1,2 @@\n+x = 1\n+y = 2\n";
    expect(apply(create, null)).toMatchObject({ ok: true, content: "x = 1\ny = 2\n" });
    expect(apply(create, "exists\n").ok).toBe(false);
    const del = "--- a/sglang/old.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-x = 1\n-y = 2\n";
    expect(apply(del, "x = 1\ny = 2\n")).toMatchObject({ ok: true, content: null });
    expect(apply(del, "x = 1\ny = 2\nz = 3\n").ok).toBe(false);
    expect(apply(del, null).ok).toBe(false);
  });

  it("is byte exact for non-ASCII content", () => {
    const utf8 = Buffer.from("é\n€\n", "utf8").toString("latin1");
    const patch = Buffer.from(
      "--- a/sglang/f\n+++ b/sglang/f\n@@ -1,2 +1,2 @@\n é\n-€\n+¥\n",
      "utf8",
    ).toString("latin1");
    const r = apply(patch, utf8);
    expect(r.ok).toBe(true);
    if (r.ok) expect(Buffer.from(r.content as string, "latin1").toString("utf8")).toBe("é\n¥\n");
  });
});
