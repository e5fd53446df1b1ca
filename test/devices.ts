// The devices every op test runs on: JS always, plus each native backend that works on this machine.
import { Device } from "../src/index.ts";

export function testDevices(): string[] {
  return Device.preference.filter((name) => Device.isAvailable(name));
}
