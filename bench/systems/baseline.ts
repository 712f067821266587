import * as fs from 'node:fs';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { z } from 'zod';
import type { GatewayStack, StackOptions } from '../../control-plane/devstack/stack';

/**
 * Another revision of the gateway beside this tree's (bench/revision-cost.ts, bench/list-cost.ts): a
 * baseline worktree, built, whose own GatewayStack.start runs its dist/ and its call script.
 */
export function baselineStart(worktree: string): (options: StackOptions) => Promise<GatewayStack> {
  const stackModule = path.join(worktree, 'dist', 'control-plane', 'devstack', 'stack.js');
  if (!fs.existsSync(stackModule)) throw new Error(`${worktree}: no ${path.relative(worktree, stackModule)} (build it first: npx tsc -p tsconfig.json)`);
  type StackClass = { start(options: StackOptions): Promise<GatewayStack> };
  const isStackClass = (value: unknown) => typeof value === 'function' && typeof (value as Partial<StackClass>).start === 'function';
  const loaded = z.object({ GatewayStack: z.custom<StackClass>(isStackClass, `${stackModule} exports no GatewayStack`) }).parse(require(stackModule));
  return (options) => loaded.GatewayStack.start(options);
}

/** A worktree's revision as a results file names it: short hash and subject. */
export const revisionOf = (worktree: string) => execFileSync('git', ['-C', worktree, 'log', '-1', '--format=%h %<(72,trunc)%s'], { encoding: 'utf8' }).trim();
