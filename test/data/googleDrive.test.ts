// Reading the download URL out of the pages Google Drive puts in front of large files.
import { test } from "node:test";
import assert from "node:assert/strict";
import { confirmedDownloadUrl, driveUrl, DriveError } from "../../mlperf/bert/data/googleDrive.ts";
import { virusScanPage } from "./httpFixtureServer.ts";

const PAGE_URL = "https://drive.google.com/uc?id=FILEID&export=download";

test("driveUrl is the uc?id= direct-download link", () => {
  assert.equal(
    driveUrl("1USK108J6hMM_d27xCHi738qBL8_BT1u1"),
    "https://drive.google.com/uc?id=1USK108J6hMM_d27xCHi738qBL8_BT1u1&export=download",
  );
});

test("the download form's action plus its hidden inputs make the confirmed URL", () => {
  const page = virusScanPage("https://drive.usercontent.google.com/download", "FILEID", "0f1e-uuid");
  assert.equal(
    confirmedDownloadUrl(page, PAGE_URL),
    "https://drive.usercontent.google.com/download?id=FILEID&export=download&confirm=t&uuid=0f1e-uuid",
  );
});

test("an older page's /uc?export=download&confirm= link is resolved against the page", () => {
  const page = `<a id="uc-download-link" href="/uc?export=download&amp;confirm=Ab1x&amp;id=FILEID">Download anyway</a>`;
  assert.equal(
    confirmedDownloadUrl(page, PAGE_URL),
    "https://drive.google.com/uc?export=download&confirm=Ab1x&id=FILEID",
  );
});

test("a downloadUrl in the page's JSON is unescaped", () => {
  const page = `<script>var x = {"downloadUrl":"https://doc-0s.googleusercontent.com/d?id\\u003dFILEID\\u0026e\\u003ddownload"};</script>`;
  assert.equal(confirmedDownloadUrl(page, PAGE_URL), "https://doc-0s.googleusercontent.com/d?id=FILEID&e=download");
});

test("Drive's error subcaption becomes a DriveError", () => {
  const page = `<p class="uc-error-caption">Sorry, you can&#39;t view or download this file at this time.</p>
<p class="uc-error-subcaption">Too many users have viewed or downloaded this file recently. Please try accessing the file again later.</p>`;
  assert.throws(
    () => confirmedDownloadUrl(page, PAGE_URL),
    (error: Error) => {
      assert.ok(error instanceof DriveError);
      assert.match(
        error.message,
        /refused https:\/\/drive\.google\.com\/uc\?id=FILEID.*: Too many users have viewed or downloaded/,
      );
      return true;
    },
  );
});

test("a page with no way to the file is a DriveError", () => {
  assert.throws(
    () => confirmedDownloadUrl("<html><body>Sign in</body></html>", PAGE_URL),
    /the page has no download link/,
  );
});
