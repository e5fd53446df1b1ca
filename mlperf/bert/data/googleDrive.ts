// Google Drive downloads the way gdown does them: `uc?id=` serves small files directly, and
// for large ones an HTML "can't scan this file for viruses" page whose form (or link) leads
// to the file once it is requested with `confirm` (and, today, `uuid`).

/** The direct-download URL of a public Drive file. */
export function driveUrl(fileId: string): string {
  return `https://drive.google.com/uc?id=${encodeURIComponent(fileId)}&export=download`;
}

/** Drive answered with a page that leads to no file (quota exceeded, not shared, removed). */
export class DriveError extends Error {
  constructor(
    message: string,
    readonly pageUrl: string,
  ) {
    super(`Google Drive refused ${pageUrl}: ${message}`);
    this.name = "DriveError";
  }
}

/**
 * The URL that confirms a download, read from the HTML page Drive sent instead of the file:
 * the `download-form` (its action plus its hidden inputs as the query), an older
 * `/uc?export=download&confirm=` link, or a `"downloadUrl"` in the page's JSON.
 */
export function confirmedDownloadUrl(html: string, pageUrl: string): string {
  const form = /<form\b[^>]*\bid="download-form"[^>]*>([\s\S]*?)<\/form>/i.exec(html);
  if (form) {
    const action = attribute(form[0].slice(0, form[0].indexOf(">") + 1), "action");
    const url = new URL(action ?? pageUrl, pageUrl);
    for (const input of form[1]!.match(/<input\b[^>]*>/gi) ?? []) {
      const name = attribute(input, "name");
      if (name !== undefined && attribute(input, "type")?.toLowerCase() === "hidden") {
        url.searchParams.set(name, attribute(input, "value") ?? "");
      }
    }
    return url.href;
  }
  const link = /href="(\/uc\?export=download[^"]*)"/.exec(html);
  if (link) return new URL(decodeEntities(link[1]!), pageUrl).href;
  const json = /"downloadUrl":"((?:[^"\\]|\\.)+)"/.exec(html);
  if (json) return JSON.parse(`"${json[1]}"`) as string;
  const error = /<p class="uc-error-subcaption">([\s\S]*?)<\/p>/.exec(html);
  if (error) throw new DriveError(decodeEntities(error[1]!.replace(/<[^>]*>/g, "")), pageUrl);
  throw new DriveError("the page has no download link (is the file shared with 'anyone with the link'?)", pageUrl);
}

function attribute(tag: string, name: string): string | undefined {
  const match = new RegExp(`\\b${name}="([^"]*)"`, "i").exec(tag);
  return match ? decodeEntities(match[1]!) : undefined;
}

const NAMED_ENTITIES: Record<string, string> = { amp: "&", quot: '"', apos: "'", lt: "<", gt: ">" };

function decodeEntities(text: string): string {
  return text.replace(/&(#x[0-9a-f]+|#[0-9]+|[a-z]+);/gi, (whole, entity: string) => {
    if (entity[0] === "#") {
      const code =
        entity[1] === "x" || entity[1] === "X" ? parseInt(entity.slice(2), 16) : parseInt(entity.slice(1), 10);
      return String.fromCodePoint(code);
    }
    return NAMED_ENTITIES[entity.toLowerCase()] ?? whole;
  });
}
