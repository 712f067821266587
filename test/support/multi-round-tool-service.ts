import { McpServer, acceptedContent, createMcpHandler, inputRequired } from '@modelcontextprotocol/server';
import { toNodeHandler } from '@modelcontextprotocol/node';
import express from 'express';
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { freePort } from '../../control-plane/devstack/processes';
import { LoopbackMcpService } from './loopback-mcp-service';

/** What one tools/call round brought the Tool Service: the keys of its inputResponses and its requestState. */
export interface Round {
  inputResponseKeys: string[];
  requestState?: string;
}

/**
 * A real MCP SDK v2 Tool Service of the stateless revision (2026-07-28) whose tool asks its own
 * question: `transfer` (no annotations: high risk) answers its first round with `input_required` — a
 * form-mode elicitation `confirm` and a `requestState` it minted — and completes only on a retry that
 * carries that state and an accepted `confirm`. Each state is good for one retry (kept here, the
 * Tool Service's own replay protection). It records every round it was called with.
 */
export class MultiRoundToolService extends LoopbackMcpService {
  readonly rounds: Round[] = [];
  private readonly openStates = new Set<string>();

  static async start(): Promise<MultiRoundToolService> {
    const service = new MultiRoundToolService(await freePort());
    const confirmation = z.object({ confirm: z.boolean() });
    const handler = createMcpHandler(
      () => {
        const server = new McpServer({ name: 'multi-round-tool-service', version: '1.0.0' });
        server.registerTool('transfer', { description: 'Moves money, after asking.', inputSchema: z.object({ amount: z.number(), to: z.string() }) }, async ({ amount, to }, ctx) => {
          const state = ctx.mcpReq.requestState<string>();
          service.rounds.push({ inputResponseKeys: Object.keys(ctx.mcpReq.inputResponses ?? {}), ...(state !== undefined && { requestState: state }) });
          const confirmed = acceptedContent(ctx.mcpReq.inputResponses, 'confirm', confirmation);
          if (state !== undefined && service.openStates.delete(state) && confirmed?.confirm === true) {
            return { content: [{ type: 'text' as const, text: `moved ${amount} to ${to}` }] };
          }
          const minted = randomBytes(12).toString('base64url');
          service.openStates.add(minted);
          return inputRequired({
            inputRequests: { confirm: inputRequired.elicit({ message: `Move ${amount} to ${to}?`, requestedSchema: confirmation }) },
            requestState: minted,
          });
        });
        return server;
      },
      { legacy: 'reject' },
    );
    const app = express();
    const serve = toNodeHandler(handler);
    app.all('/mcp', (req, res) => void serve(req, res));
    await service.listen(app);
    return service;
  }
}
