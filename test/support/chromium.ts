import { Browser, chromium } from 'playwright-core';
import { tools } from './tools';

/**
 * Debian's Chromium, headless, driven by playwright-core (which never downloads a browser of its own).
 * The flags keep it off the network: on these machines only package registries are reachable, and
 * Chromium's background services would keep trying. Close the browser when done.
 */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: tools().chromium,
    headless: true,
    chromiumSandbox: false,
    args: ['--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}
