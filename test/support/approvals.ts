import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { BrowserContext, Page } from 'playwright-core';
import { testDir } from './gateway-fixture';
import { TestUser, passwordOf, secretOf } from './keycloak';

/**
 * Approvals in tests (docs/approval-and-audit.md): a gateway's sidecars with approval pages, and a person
 * on such a page in a real browser — the page sends a browser without an approver session to the
 * identity provider, whose login form brings it back.
 */

/** Opens an approval link as `user`, signing in at Keycloak when this browser context has no approver session yet. */
export async function openApprovalPage(context: BrowserContext, link: string, user: TestUser): Promise<Page> {
  const page = await context.newPage();
  await page.goto(link);
  if (page.url() !== link) {
    await page.fill('#username', user);
    await page.fill('#password', passwordOf(user));
    await page.click('#kc-login');
    await page.waitForURL(link);
  }
  return page;
}

/** Approves or declines on an open approval page, with an optional comment: the decision the page then shows. */
export async function decideOnPage(page: Page, decision: { approve: boolean; comment?: string }): Promise<string> {
  if (decision.comment) await page.fill('#comment', decision.comment);
  await page.click(decision.approve ? '#approve' : '#decline');
  await page.waitForSelector('#decision');
  return (await page.textContent('#decision')) ?? '';
}

/**
 * The sidecar options that turn approvals on for a test gateway `name` listening on `listener`: pages at
 * that origin, approvers signing in as Keycloak's client mcpgw-approvals, a fresh signing key.
 */
export function approvalSidecarArgs(name: string, listener: number, issuer: string, ttlSeconds: number): string[] {
  // startGateway makes its own folder anew: the gateway's key and client secret live beside it.
  const secrets = testDir(`${name}-secrets`);
  const keyFile = path.join(secrets, 'approval.key');
  fs.writeFileSync(keyFile, randomBytes(32));
  const secretFile = path.join(secrets, 'approval-client.secret');
  fs.writeFileSync(secretFile, secretOf('mcpgw-approvals'));
  return [
    '--approval-public-url', `http://127.0.0.1:${listener}`,
    '--approval-issuer', issuer,
    '--approval-client-id', 'mcpgw-approvals',
    '--approval-client-secret-file', secretFile,
    '--approval-key-file', keyFile,
    '--approval-ttl-s', String(ttlSeconds),
  ];
}
