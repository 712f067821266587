import { BrowserContext, Page } from 'playwright-core';
import { TestUser, passwordOf } from './keycloak';

/**
 * A person on the gateway's approval page (docs/approval-and-audit.md), in a real browser: the page
 * sends a browser without an approver session to the identity provider, whose login form brings it back.
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
