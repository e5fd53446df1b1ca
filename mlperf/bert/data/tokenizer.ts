// BERT's uncased tokenizer (BasicTokenizer + WordPiece) with the reference's Python
// semantics: code points, not UTF-16 units; Python's whitespace; CPython 3.11's Unicode 14.0
// categories. Where tinygrad's port and MLCommons' tokenization.py differ, MLCommons wins:
// only Cc and Cf characters are deleted by the cleanup.
import { readFileSync } from "node:fs";

/** A vocabulary or tokenizer input the reference would reject or misread. */
export class VocabError extends Error {
  override name = "VocabError";
}

/** The vocabulary: `tokens[id]` and its inverse. */
export interface Vocab {
  tokens: string[];
  ids: Map<string, number>;
  /** Where it came from, for error messages. */
  source: string;
}

/** Words longer than this many code points become `[UNK]` (both references use 200). */
const MAX_INPUT_CHARS_PER_WORD = 200;
const UNKNOWN_TOKEN = "[UNK]";
const CONTINUATION_PREFIX = "##";

// Python's str.strip()/str.split() whitespace (JavaScript's \s differs: it has U+FEFF and
// lacks U+001C-U+001F and U+0085).
const PYTHON_WHITESPACE =
  "\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000";
const PYTHON_WHITESPACE_SET = new Set(Array.from(PYTHON_WHITESPACE, (c) => c.charCodeAt(0)));

/** Whether a UTF-16 unit is whitespace for Python's `str.isspace()` (all are in the BMP). */
export function isPythonWhitespace(code: number): boolean {
  return PYTHON_WHITESPACE_SET.has(code);
}

/** Python's `str.strip()` with no argument. */
export function pythonStrip(text: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && isPythonWhitespace(text.charCodeAt(start))) start++;
  while (end > start && isPythonWhitespace(text.charCodeAt(end - 1))) end--;
  return start === 0 && end === text.length ? text : text.slice(start, end);
}

/** Reads a vocab file: one token per line, each stripped the Python way, in id order. */
export function loadVocab(path: string): Vocab {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new VocabError(
      `cannot read vocab file ${path}${code === "ENOENT" ? ": it does not exist" : `: ${(error as Error).message}`}`,
    );
  }
  return parseVocab(text, path);
}

/** Parses vocab text (see `loadVocab`); `source` names it in errors. */
export function parseVocab(text: string, source: string): Vocab {
  const lines = text.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  if (lines.length === 0) throw new VocabError(`vocab file ${source} is empty`);
  const tokens = lines.map(pythonStrip);
  const ids = new Map<string, number>();
  tokens.forEach((token, id) => {
    const earlier = ids.get(token);
    // The reference's id-to-word list would then disagree with its word-to-id map.
    if (earlier !== undefined)
      throw new VocabError(
        `vocab file ${source}: token ${JSON.stringify(token)} on line ${id + 1} repeats line ${earlier + 1}`,
      );
    ids.set(token, id);
  });
  return { tokens, ids, source };
}

// Per-code-point facts, computed once on first sight (ASCII up front).
const KNOWN = 1;
const DELETED = 2; // Cc, Cf (except \t \n \r), U+0000 and U+FFFD: dropped by the cleanup
const SPACE = 4; // split on: \t \n \r, Zs, and U+2028/U+2029 (Python whitespace the cleanup keeps)
const CJK = 8; // BERT's CJK ranges: each such character is its own word
const PUNCTUATION = 16; // ASCII symbols and P*: each its own token
const NONSPACING_MARK = 32; // Mn in Unicode 14: dropped after NFD
const UNASSIGNED_IN_UNICODE_14 = 64; // Cn for CPython 3.11: no case mapping, no decomposition
const charFlags = new Uint8Array(0x110000);

// Inclusive ranges of code points assigned in Unicode 15.0-17.0, that is, unassigned (Cn) in
// CPython 3.11's Unicode 14.0 while Node's ICU may give them a category, case or decomposition.
const ASSIGNED_AFTER_UNICODE_14 = [
  0x88f, 0x88f, 0x897, 0x897, 0xc5c, 0xc5c, 0xcdc, 0xcdc, 0xcf3, 0xcf3, 0xece, 0xece, 0x1acf, 0x1add, 0x1ae0, 0x1aeb,
  0x1b4e, 0x1b4f, 0x1b7f, 0x1b7f, 0x1c89, 0x1c8a, 0x20c1, 0x20c1, 0x2427, 0x2429, 0x2b96, 0x2b96, 0x2ffc, 0x2fff,
  0x31e4, 0x31e5, 0x31ef, 0x31ef, 0xa7cb, 0xa7cf, 0xa7d2, 0xa7d2, 0xa7d4, 0xa7d4, 0xa7da, 0xa7dc, 0xa7f1, 0xa7f1,
  0xfbc3, 0xfbd2, 0xfd90, 0xfd91, 0xfdc8, 0xfdce, 0x105c0, 0x105f3, 0x10940, 0x10959, 0x10d40, 0x10d65, 0x10d69,
  0x10d85, 0x10d8e, 0x10d8f, 0x10ec2, 0x10ec7, 0x10ed0, 0x10ed8, 0x10efa, 0x10eff, 0x1123f, 0x11241, 0x11380, 0x11389,
  0x1138b, 0x1138b, 0x1138e, 0x1138e, 0x11390, 0x113b5, 0x113b7, 0x113c0, 0x113c2, 0x113c2, 0x113c5, 0x113c5, 0x113c7,
  0x113ca, 0x113cc, 0x113d5, 0x113d7, 0x113d8, 0x113e1, 0x113e2, 0x116d0, 0x116e3, 0x11b00, 0x11b09, 0x11b60, 0x11b67,
  0x11bc0, 0x11be1, 0x11bf0, 0x11bf9, 0x11db0, 0x11ddb, 0x11de0, 0x11de9, 0x11f00, 0x11f10, 0x11f12, 0x11f3a, 0x11f3e,
  0x11f5a, 0x1342f, 0x1342f, 0x13439, 0x13455, 0x13460, 0x143fa, 0x16100, 0x16139, 0x16d40, 0x16d79, 0x16ea0, 0x16eb8,
  0x16ebb, 0x16ed3, 0x16ff2, 0x16ff6, 0x187f8, 0x187ff, 0x18cff, 0x18cff, 0x18d09, 0x18d1e, 0x18d80, 0x18df2, 0x1b132,
  0x1b132, 0x1b155, 0x1b155, 0x1cc00, 0x1ccfc, 0x1cd00, 0x1ceb3, 0x1ceba, 0x1ced0, 0x1cee0, 0x1cef0, 0x1d2c0, 0x1d2d3,
  0x1df25, 0x1df2a, 0x1e030, 0x1e06d, 0x1e08f, 0x1e08f, 0x1e4d0, 0x1e4f9, 0x1e5d0, 0x1e5fa, 0x1e5ff, 0x1e5ff, 0x1e6c0,
  0x1e6de, 0x1e6e0, 0x1e6f5, 0x1e6fe, 0x1e6ff, 0x1f6d8, 0x1f6d8, 0x1f6dc, 0x1f6dc, 0x1f774, 0x1f77f, 0x1f7d9, 0x1f7d9,
  0x1f8b2, 0x1f8bb, 0x1f8c0, 0x1f8c1, 0x1f8d0, 0x1f8d8, 0x1fa54, 0x1fa57, 0x1fa75, 0x1fa77, 0x1fa87, 0x1fa8a, 0x1fa8e,
  0x1fa8f, 0x1faad, 0x1faaf, 0x1fabb, 0x1fabf, 0x1fac6, 0x1fac6, 0x1fac8, 0x1fac8, 0x1facd, 0x1facf, 0x1fada, 0x1fadc,
  0x1fadf, 0x1fadf, 0x1fae8, 0x1faea, 0x1faef, 0x1faef, 0x1faf7, 0x1faf8, 0x1fbcb, 0x1fbef, 0x1fbfa, 0x1fbfa, 0x2b739,
  0x2b73f, 0x2cea2, 0x2cead, 0x2ebf0, 0x2ee5d, 0x31350, 0x33479,
];
// The one character whose category changed in a way the tokenizer sees: Mn in 14.0, Mc later.
const AHOM_SIGN_KILLER = 0x1171e;

function isCjk(cp: number): boolean {
  return (
    (cp >= 0x4e00 && cp <= 0x9fff) ||
    (cp >= 0x3400 && cp <= 0x4dbf) ||
    (cp >= 0x20000 && cp <= 0x2a6df) ||
    (cp >= 0x2a700 && cp <= 0x2b73f) ||
    (cp >= 0x2b740 && cp <= 0x2b81f) ||
    (cp >= 0x2b820 && cp <= 0x2ceaf) ||
    (cp >= 0xf900 && cp <= 0xfaff) ||
    (cp >= 0x2f800 && cp <= 0x2fa1f)
  );
}

function isAssignedAfterUnicode14(cp: number): boolean {
  for (let i = 0; i < ASSIGNED_AFTER_UNICODE_14.length; i += 2) {
    if (cp < ASSIGNED_AFTER_UNICODE_14[i]!) return false;
    if (cp <= ASSIGNED_AFTER_UNICODE_14[i + 1]!) return true;
  }
  return false;
}

const CONTROL_OR_FORMAT = /^[\p{Cc}\p{Cf}]$/u;
const SPACE_SEPARATOR = /^\p{Zs}$/u;
const PUNCTUATION_CATEGORY = /^\p{P}$/u;
const NONSPACING = /^\p{Mn}$/u;

function computeFlags(cp: number): number {
  let flags = KNOWN;
  if (cp <= 0x7f) {
    if (cp === 0x09 || cp === 0x0a || cp === 0x0d || cp === 0x20) flags |= SPACE;
    else if (cp < 0x20 || cp === 0x7f) flags |= DELETED;
    // BERT counts every non-alphanumeric printable ASCII character as punctuation.
    else if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126))
      flags |= PUNCTUATION;
    return flags;
  }
  if (isCjk(cp)) flags |= CJK;
  if (isAssignedAfterUnicode14(cp)) return flags | UNASSIGNED_IN_UNICODE_14;
  const char = String.fromCodePoint(cp);
  if (cp === 0xfffd || CONTROL_OR_FORMAT.test(char)) flags |= DELETED;
  else if (cp === 0x2028 || cp === 0x2029 || SPACE_SEPARATOR.test(char)) flags |= SPACE;
  if (PUNCTUATION_CATEGORY.test(char)) flags |= PUNCTUATION;
  if (cp === AHOM_SIGN_KILLER || NONSPACING.test(char)) flags |= NONSPACING_MARK;
  return flags;
}

function flagsOf(cp: number): number {
  const cached = charFlags[cp]!;
  if (cached !== 0) return cached;
  const flags = computeFlags(cp);
  charFlags[cp] = flags;
  return flags;
}
for (let cp = 0; cp < 0x80; cp++) flagsOf(cp);

// Two characters whose case properties changed after Unicode 14, which Greek final sigma
// sees: U+0295 was a cased Ll (now Lo), U+1171E a case-ignorable Mn (now Mc).
const CASE_CHANGED_AFTER_UNICODE_14 = /[\u0295\u{1171e}]/u;
const CASED = /^\p{Cased}$/u;
const CASE_IGNORABLE = /^\p{Case_Ignorable}$/u;
const isCased = (char: string) => char === "\u0295" || (char !== "\u{1171e}" && CASED.test(char));
const isCaseIgnorable = (char: string) => char === "\u{1171e}" || (char !== "\u0295" && CASE_IGNORABLE.test(char));

/** Python's `str.lower()`: full case mapping plus the final-sigma rule, with Unicode 14 properties. */
function lowerCase(text: string): string {
  if (!CASE_CHANGED_AFTER_UNICODE_14.test(text)) return text.toLowerCase();
  // Only capital sigma depends on context, so the rest may be mapped one character at a time.
  const chars = Array.from(text);
  const isFinalSigma = (i: number) => {
    let before = i - 1;
    while (before >= 0 && isCaseIgnorable(chars[before]!)) before--;
    if (before < 0 || !isCased(chars[before]!)) return false;
    let after = i + 1;
    while (after < chars.length && isCaseIgnorable(chars[after]!)) after++;
    return after === chars.length || !isCased(chars[after]!);
  };
  return chars
    .map((char, i) => (char === "\u03a3" ? (isFinalSigma(i) ? "\u03c2" : "\u03c3") : char.toLowerCase()))
    .join("");
}

/** The code point at `text[i]` (a lone surrogate stands for itself). */
function codePointAt(text: string, i: number): number {
  return text.codePointAt(i)!;
}

/** Lower-casing, NFD and dropping Mn, as Python does them on a whole word. */
function normalizeWord(word: string): string {
  let ascii = true;
  let unassigned = false;
  for (let i = 0; i < word.length; i++) {
    const unit = word.charCodeAt(i);
    if (unit < 0x80) continue;
    ascii = false;
    if (unit >= 0xd800 && unit <= 0xdbff) {
      if (flagsOf(codePointAt(word, i)) & UNASSIGNED_IN_UNICODE_14) unassigned = true;
      i++;
    } else if (flagsOf(unit) & UNASSIGNED_IN_UNICODE_14) unassigned = true;
  }
  if (ascii) return word.toLowerCase();
  if (!unassigned) return stripNonspacingMarks(lowerCase(word).normalize("NFD"));
  // Python leaves code points it thinks unassigned alone; they neither case (so they end a
  // final-sigma context just as a word boundary does) nor reorder in NFD (they are starters).
  let result = "";
  let runStart = 0;
  for (let i = 0; i < word.length; ) {
    const cp = codePointAt(word, i);
    const width = cp > 0xffff ? 2 : 1;
    if (flagsOf(cp) & UNASSIGNED_IN_UNICODE_14) {
      result += stripNonspacingMarks(lowerCase(word.slice(runStart, i)).normalize("NFD")) + word.slice(i, i + width);
      runStart = i + width;
    }
    i += width;
  }
  return result + stripNonspacingMarks(lowerCase(word.slice(runStart)).normalize("NFD"));
}

function stripNonspacingMarks(text: string): string {
  let result: string[] | null = null;
  let keptFrom = 0;
  for (let i = 0; i < text.length; ) {
    const cp = codePointAt(text, i);
    const width = cp > 0xffff ? 2 : 1;
    if (cp >= 0x80 && flagsOf(cp) & NONSPACING_MARK) {
      (result ??= []).push(text.slice(keptFrom, i));
      keptFrom = i + width;
    }
    i += width;
  }
  if (result === null) return text;
  result.push(text.slice(keptFrom));
  return result.join("");
}

/** Word cache bound: whole Wikipedia parts repeat most words, but memory must stay flat. */
const MAX_CACHED_WORDS = 200_000;

/** BERT uncased tokenization: `tokenize` gives word pieces, `tokenizeToIds` their ids. */
export class BertTokenizer {
  readonly vocab: Vocab;
  private readonly unknownId: number;
  /** Continuation pieces keyed without their `##`, so lookups need no concatenation. */
  private readonly continuationIds = new Map<string, number>();
  /** Longest vocab entries in UTF-16 units: no longer substring can match. */
  private readonly longestWord: number;
  private readonly longestContinuation: number;
  /**
   * A word's ids: a number for one id, else an array of them. A full cache of typed arrays took about 290 bytes a
   * word (58 MB at MAX_CACHED_WORDS); a number takes 80 bytes, three ids in an array 180.
   */
  private readonly wordCache = new Map<string, number | readonly number[]>();

  constructor(vocab: Vocab) {
    this.vocab = vocab;
    const unknownId = vocab.ids.get(UNKNOWN_TOKEN);
    if (unknownId === undefined) throw new VocabError(`vocab ${vocab.source} has no ${UNKNOWN_TOKEN} token`);
    this.unknownId = unknownId;
    let longestWord = 0;
    let longestContinuation = 0;
    for (const [token, id] of vocab.ids) {
      longestWord = Math.max(longestWord, token.length);
      if (token.startsWith(CONTINUATION_PREFIX)) {
        const rest = token.slice(CONTINUATION_PREFIX.length);
        this.continuationIds.set(rest, id);
        longestContinuation = Math.max(longestContinuation, rest.length);
      }
    }
    this.longestWord = longestWord;
    this.longestContinuation = longestContinuation;
  }

  /** Word pieces of `text`, as the reference's `FullTokenizer.tokenize`. */
  tokenize(text: string): string[] {
    return this.tokenizeToIds(text).map((id) => this.vocab.tokens[id]!);
  }

  /** The ids of `tokenize(text)`, appended to `out`. */
  tokenizeToIds(text: string, out: number[] = []): number[] {
    let wordStart = -1;
    let pieces: string[] | null = null; // parts of a word split by deleted characters
    const endWord = (end: number) => {
      if (wordStart < 0) return;
      const tail = text.slice(wordStart, end);
      const word = pieces === null ? tail : pieces.join("") + tail;
      pieces = null;
      wordStart = -1;
      if (word.length > 0) this.appendWordIds(word, out);
    };
    for (let i = 0; i < text.length; ) {
      const cp = codePointAt(text, i);
      const width = cp > 0xffff ? 2 : 1;
      const flags = flagsOf(cp);
      if (flags & DELETED) {
        if (wordStart >= 0) {
          (pieces ??= []).push(text.slice(wordStart, i));
          wordStart = i + width;
        }
      } else if (flags & SPACE) {
        endWord(i);
      } else if (flags & CJK) {
        endWord(i);
        this.appendWordIds(text.slice(i, i + width), out);
      } else if (wordStart < 0) {
        wordStart = i;
      }
      i += width;
    }
    endWord(text.length);
    return out;
  }

  /** Ids of the tokens, failing on one that the vocab lacks (Python's KeyError). */
  convertTokensToIds(tokens: readonly string[]): number[] {
    return tokens.map((token) => {
      const id = this.vocab.ids.get(token);
      if (id === undefined) throw new VocabError(`token ${JSON.stringify(token)} is not in vocab ${this.vocab.source}`);
      return id;
    });
  }

  /** One whitespace-free word of the cleaned text: normalize, split punctuation, WordPiece. */
  private appendWordIds(word: string, out: number[]): void {
    let ids = this.wordCache.get(word);
    if (ids === undefined) {
      const collected: number[] = [];
      this.splitOnPunctuation(normalizeWord(word), collected);
      ids = collected.length === 1 ? collected[0]! : collected.slice();
      if (this.wordCache.size >= MAX_CACHED_WORDS) this.wordCache.clear();
      this.wordCache.set(ownString(word), ids);
    }
    if (typeof ids === "number") out.push(ids);
    else for (let k = 0; k < ids.length; k++) out.push(ids[k]!);
  }

  private splitOnPunctuation(word: string, out: number[]): void {
    let pieceStart = 0;
    for (let i = 0; i < word.length; ) {
      const cp = codePointAt(word, i);
      const width = cp > 0xffff ? 2 : 1;
      const flags = flagsOf(cp);
      if (flags & (PUNCTUATION | SPACE)) {
        if (i > pieceStart) this.appendWordPieceIds(word.slice(pieceStart, i), out);
        if (flags & PUNCTUATION) this.appendWordPieceIds(word.slice(i, i + width), out);
        pieceStart = i + width;
      }
      i += width;
    }
    if (word.length > pieceStart) this.appendWordPieceIds(word.slice(pieceStart), out);
  }

  /** Greedy longest-match-first WordPiece; `[UNK]` for the whole piece when it fails. */
  private appendWordPieceIds(piece: string, out: number[]): void {
    const offsets = codePointOffsets(piece);
    const length = offsets === null ? piece.length : offsets.length - 1;
    if (length > MAX_INPUT_CHARS_PER_WORD) {
      out.push(this.unknownId);
      return;
    }
    const whole = this.vocab.ids.get(piece);
    if (whole !== undefined) {
      out.push(whole);
      return;
    }
    const offsetOf = (index: number) => (offsets === null ? index : offsets[index]!);
    const firstId = out.length;
    let start = 0;
    while (start < length) {
      const lookup = start === 0 ? this.vocab.ids : this.continuationIds;
      const longest = start === 0 ? this.longestWord : this.longestContinuation;
      let end = length;
      while (end > start && offsetOf(end) - offsetOf(start) > longest) end--;
      let id: number | undefined;
      for (; end > start; end--) {
        id = lookup.get(piece.slice(offsetOf(start), offsetOf(end)));
        if (id !== undefined) break;
      }
      if (id === undefined) {
        out.length = firstId;
        out.push(this.unknownId);
        return;
      }
      out.push(id);
      start = end;
    }
  }
}

/**
 * `text` as a string of its own: V8 keeps a long substring as a view into its whole parent, so a cached word would
 * otherwise hold on to the chunk of text it was cut from long after that chunk is read. (The concatenation is
 * flattened into a new string by the slice.)
 */
const ownString = (text: string): string => ` ${text}`.slice(1);

/** UTF-16 offsets of each code point (and the end), or null when every unit is one. */
function codePointOffsets(text: string): number[] | null {
  let offsets: number[] | null = null;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        offsets ??= Array.from({ length: i + 1 }, (_, k) => k);
        i++;
        offsets.push(i + 1);
        continue;
      }
    }
    offsets?.push(i + 1);
  }
  return offsets;
}
