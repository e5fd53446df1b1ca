// Named tensors of a model (or of anything holding tensors): state dicts by dotted names,
// loading them back, and safetensors files of them in every tsgrad dtype.
import { type DType, type DTypeName, type TypedArray, dtypes } from "../dtype.ts";
import { TsgradError, arraysEqual, fmtShape, prod } from "../helpers.ts";
import { Tensor } from "../tensor/index.ts";
import {
  type SafetensorsDType,
  type SafetensorsTensor,
  type SafetensorsWriteOptions,
  readSafetensorsFile,
  writeSafetensorsFile,
} from "../io/safetensors.ts";

/** Tensors by dotted name (`bert.encoder.layer.0.attention.self.query.weight`), in a stable order. */
export type StateDict = Record<string, Tensor>;

/** An object that says itself which tensors make up its state (optimizers, schedulers). */
export interface HasStateDict {
  stateDict(): StateDict;
}

const hasStateDict = (x: object): x is HasStateDict => typeof (x as Partial<HasStateDict>).stateDict === "function";

/**
 * Every tensor reachable from `root` through its enumerable properties and arrays, named by the
 * path to it. Objects with a `stateDict()` method contribute that instead; `#private` fields
 * (a tied weight held by a second module, say) are not enumerable and so not listed twice.
 */
export function getStateDict(root: unknown, prefix = ""): StateDict {
  const out: StateDict = {};
  const seen = new Set<object>();
  const walk = (value: unknown, name: string): void => {
    if (value instanceof Tensor) {
      out[name] = value;
      return;
    }
    if (typeof value !== "object" || value === null || seen.has(value)) return;
    seen.add(value);
    const join = (key: string | number): string => (name === "" ? String(key) : `${name}.${key}`);
    if (hasStateDict(value)) for (const [key, t] of Object.entries(value.stateDict())) out[join(key)] = t;
    else if (Array.isArray(value)) value.forEach((item, i) => walk(item, join(i)));
    else for (const [key, item] of Object.entries(value)) walk(item, join(key));
  };
  walk(root, prefix);
  return out;
}

/**
 * The trainable tensors (requiresGrad) of `getStateDict(root)`, in the same order: what an optimizer takes. State such
 * as a batch norm's running statistics or a frozen weight is left out.
 */
export function getParameters(root: unknown): Tensor[] {
  return Object.values(getStateDict(root)).filter((t) => t.requiresGrad);
}

/** A state dict that does not fit the model: names missing or unexpected, or a shape that differs. */
export class StateDictError extends TsgradError {
  override name = "StateDictError";
}

const listNames = (names: string[]): string =>
  names.length <= 8 ? names.join(", ") : `${names.slice(0, 8).join(", ")} and ${names.length - 8} more`;

/**
 * Writes `state` into the tensors of `root` (by name, in place, so tied and optimizer-held
 * references stay valid), cast to each target's dtype and moved to its device. With `strict`
 * (the default) every name must match both ways.
 */
export function loadStateDict(
  root: unknown,
  state: StateDict,
  { strict = true, source = "state dict" }: { strict?: boolean; source?: string } = {},
): void {
  const targets = getStateDict(root);
  if (strict) {
    const missing = Object.keys(targets).filter((name) => !(name in state));
    const unexpected = Object.keys(state).filter((name) => !(name in targets));
    if (missing.length || unexpected.length) {
      throw new StateDictError(
        `${source}: ${missing.length} missing (${listNames(missing)}), ${unexpected.length} unexpected (${listNames(unexpected)})`,
      );
    }
  }
  const written: Tensor[] = [];
  for (const [name, target] of Object.entries(targets)) {
    const value = state[name];
    if (!value) continue;
    if (!arraysEqual(value.shape, target.shape))
      throw new StateDictError(
        `${source}: "${name}" has shape ${fmtShape(value.shape)}, the model wants ${fmtShape(target.shape)}`,
      );
    written.push(target.assign(value.to(target.device).cast(target.dtype)));
  }
  Tensor.realizeAll(written);
}

const isHalfFloat = (dtype: DType): boolean => dtype === dtypes.float16 || dtype === dtypes.bfloat16;

/** A tensor of `data`, which holds elements as tsgrad stores them (16-bit floats as their bits). */
export function tensorFromStorage(data: TypedArray, shape: readonly number[], dtype: DType, device?: string): Tensor {
  if (data.length !== prod(shape as number[]))
    throw new TsgradError(
      `tensorFromStorage: shape ${fmtShape(shape)} needs ${prod(shape as number[])} elements, data has ${data.length}`,
    );
  if (isHalfFloat(dtype)) return new Tensor(data, { dtype: dtypes.uint16, device }).bitcast(dtype).reshape(shape);
  return new Tensor(data, { dtype, device }).reshape(shape);
}

/** The elements as tsgrad stores them, row-major (16-bit floats as their bits, int64 as BigInt64Array). */
export function storageOf(t: Tensor): TypedArray {
  return isHalfFloat(t.dtype) ? t.bitcast(dtypes.uint16).toArray() : t.toArray();
}

const SAFETENSORS_DTYPES: Record<DTypeName, SafetensorsDType> = {
  bool: "BOOL",
  int8: "I8",
  uint8: "U8",
  int16: "I16",
  uint16: "U16",
  int32: "I32",
  uint32: "U32",
  int64: "I64",
  float16: "F16",
  bfloat16: "BF16",
  float32: "F32",
  float64: "F64",
};
const TSGRAD_DTYPES = new Map(
  Object.entries(SAFETENSORS_DTYPES).map(([name, code]) => [code, dtypes[name as DTypeName]]),
);

/** The safetensors entry holding `t`'s values. */
export function toSafetensorsTensor(t: Tensor): SafetensorsTensor {
  return { dtype: SAFETENSORS_DTYPES[t.dtype.name], shape: t.shape, data: storageOf(t) } as SafetensorsTensor;
}

/**
 * Writes `state` to a safetensors file, all or nothing (temp file, then rename), with each tensor's checksum;
 * `{ overwrite: false }` fails (EEXIST) rather than replace a file at `path`.
 */
export function safeSave(
  state: StateDict,
  path: string,
  metadata: Record<string, string> = {},
  options: SafetensorsWriteOptions = {},
): void {
  const tensors: Record<string, SafetensorsTensor> = {};
  for (const [name, t] of Object.entries(state)) tensors[name] = toSafetensorsTensor(t);
  writeSafetensorsFile(path, tensors, metadata, options);
}

/**
 * Reads a safetensors file into tensors on `device` (the default device unless given). A file that carries checksums
 * (`checksummed`: all that tsgrad writes) is verified first: a corrupt one is an error naming the file and tensor.
 */
export function safeLoad(
  path: string,
  { device }: { device?: string } = {},
): { state: StateDict; metadata: Record<string, string>; checksummed: boolean } {
  const { tensors, metadata, checksummed } = readSafetensorsFile(path);
  const state: StateDict = {};
  for (const [name, { dtype, shape, data }] of Object.entries(tensors)) {
    const tsgradDtype = TSGRAD_DTYPES.get(dtype);
    if (!tsgradDtype) throw new TsgradError(`${path}: tensor "${name}" is ${dtype}, which tsgrad has no dtype for`);
    state[name] = tensorFromStorage(data as TypedArray, shape, tsgradDtype, device);
  }
  return { state, metadata, checksummed };
}

const TRAINING_STATE_FORMAT = "tsgrad-training-state";

/**
 * Saves everything a run needs to resume exactly, e.g. `{ model, optimizer, scheduler }`: one
 * safetensors file whose names are prefixed by the part (`model.bert...`, `optimizer.0.m.3`,
 * `scheduler.0.step`), written atomically.
 */
export function saveTrainingState(
  path: string,
  parts: Record<string, unknown>,
  metadata: Record<string, string> = {},
  options: SafetensorsWriteOptions = {},
): void {
  safeSave(getStateDict(parts), path, { ...metadata, format: TRAINING_STATE_FORMAT }, options);
}

/**
 * Restores what `saveTrainingState` wrote into the same parts (strictly: every name must match), verified against its
 * checksums; returns its metadata. A state written before checksums loads with a warning.
 */
export function loadTrainingState(path: string, parts: Record<string, unknown>): Record<string, string> {
  const { state, metadata, checksummed } = safeLoad(path);
  if (metadata.format !== TRAINING_STATE_FORMAT)
    throw new TsgradError(
      `${path}: not a tsgrad training state (metadata format is ${JSON.stringify(metadata.format)})`,
    );
  if (!checksummed)
    console.error(`warning: ${path} was written without checksums (before tsgrad had them); it loads unverified`);
  loadStateDict(parts, state, { source: path });
  return metadata;
}
