// The devices every op test runs on: JS always, plus each native backend that works on this machine
// (TSGRAD_TEST_DEVICES=WEBGPU,JS picks some of them, to look at one backend's failures alone).
import { Device } from "../src/index.ts";

export function testDevices(): string[] {
  const available = Device.preference.filter((name) => Device.isAvailable(name));
  const picked = process.env.TSGRAD_TEST_DEVICES?.split(",").filter(Boolean);
  return picked ? available.filter((name) => picked.includes(name)) : available;
}

/** Whether kernels on `device` compute in 64-bit types: WGSL has none, so WEBGPU refuses int64 and float64 kernels. */
export const has64BitKernels = (device: string): boolean => device !== "WEBGPU";

/** What a device refuses a 64-bit kernel with. */
export const NO_64_BIT = /WEBGPU: \S+ uses (int|float)64, which WGSL has no type for/;

/**
 * Whether `device`'s compiler may flush subnormals, drop the sign of zero and reassociate float arithmetic, as WGSL
 * lets implementations do (SwiftShader does all three): tests of those IEEE details do not hold there.
 */
export const relaxedFloat = (device: string): boolean => device === "WEBGPU";

/** Largest |x| whose sin and cos `device` reduces accurately (WEBGPU: the renderer's own reduction; docs/devices.md). */
export const accurateTrigRange = (device: string): number => (device === "WEBGPU" ? 205_000 : Number.POSITIVE_INFINITY);
