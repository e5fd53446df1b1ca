// The `io` namespace of tsgrad's public API (`import { io } from "tsgrad"`): file formats over plain typed
// arrays, with no tensors (`nn.safeSave`/`nn.safeLoad` turn state dicts into safetensors files).
export {
  encodeSafetensors,
  decodeSafetensors,
  readSafetensorsFile,
  readSafetensorsHeader,
  verifySafetensorsFile,
  writeSafetensorsFile,
  writeSafetensorsStream,
  SafetensorsError,
  type SafetensorsDType,
  type SafetensorsTensor,
  type SafetensorsContents,
  type SafetensorsEntry,
  type SafetensorsHeader,
  type SafetensorsStreamedTensor,
  type SafetensorsWriteOptions,
  type VerifySafetensorsOptions,
} from "./safetensors.ts";
export {
  listTfCheckpoint,
  readTfCheckpoint,
  checkTfCheckpoint,
  TfCheckpointError,
  TfChecksumError,
  type TfCheckpointEntry,
  type TfTensor,
  type TfTensorData,
  type TfTensorCheck,
  type ReadTfCheckpointOptions,
} from "./tf_checkpoint.ts";
export { crc32c, maskedCrc32c } from "./crc32c.ts";
export { removeStaleTemps, writeFileAtomic, writeFileAtomicFrom, type AtomicWriteOptions } from "./atomic_file.ts";
