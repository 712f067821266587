import { randomBytes, timingSafeEqual } from 'node:crypto';
import { parse as parseCookies, serialize as serializeCookie } from 'cookie';
import express, { Request, Response } from 'express';
import { z } from 'zod';
import { Logger } from '../shared/log';
import { APPROVAL_ID_PATTERN, ApprovalRequest, ApprovalStore, Approver, Decision, HistoryEntry, signGrant } from './approval-store';
import { ApproverSignIn } from './approver-sign-in';

/**
 * The approval pages (docs/approval-and-audit.md), served by the sidecars behind Envoy at
 * <publicUrl>/approvals/: a person signs in at the identity provider, sees what an agent wants to call
 * (tool, backend, route, risk, a readable summary of the arguments, earlier decisions on the tool)
 * and approves or declines it, with an optional comment kept with the decision.
 */

const LOGIN_COOKIE = 'mcpgw_approval_login';
const APPROVER_COOKIE = 'mcpgw_approver';
const COMMENT_MAX = 1000;

const escapeHtml = (text: string) =>
  text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

/** Who may decide a request: a member of its approvers group, or (without one) the caller themself. */
export function mayDecide(approver: Approver, request: ApprovalRequest): boolean {
  if (request.approvers) return approver.groups.includes(request.approvers);
  return request.binding.issuer === approver.issuer && request.binding.subject === approver.subject;
}

const decisionForm = z.object({
  decision: z.enum(['approve', 'decline']),
  comment: z.string().max(COMMENT_MAX).optional().default(''),
  csrf: z.string().min(1),
});

const sameSecret = (a: string, b: string) => a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b));
const nameOf = (person: { name?: string; subject: string }) => person.name ?? person.subject;

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem;color:#1d1d1f}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem}dt{font-weight:600}dd{margin:0}
pre{white-space:pre-wrap;word-break:break-all;margin:0;font-size:.9rem}
.risk-high{color:#b00020;font-weight:700}.risk-medium{color:#8a5a00;font-weight:700}
textarea{width:100%;min-height:4rem}button{font-size:1rem;padding:.4rem 1.2rem;margin-right:.6rem}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.3rem;text-align:left;vertical-align:top}
</style></head><body>
<h1>${escapeHtml(title)}</h1>
${body}
</body></html>
`;
}

function historyTable(history: HistoryEntry[]): string {
  if (history.length === 0) return '<p>No earlier decisions on this tool.</p>';
  const rows = history
    .map(
      (entry) =>
        `<tr><td>${escapeHtml(entry.at)}</td><td>${entry.decision === 'granted' ? 'approved' : 'declined'}</td><td>${escapeHtml(nameOf(entry.by))}</td>` +
        `<td>${escapeHtml(entry.requestedBy ? nameOf(entry.requestedBy) : '(unknown caller)')}</td><td>${escapeHtml(entry.comment ?? '')}</td></tr>`,
    )
    .join('\n');
  return `<table><thead><tr><th>when</th><th>decision</th><th>by</th><th>asked for</th><th>comment</th></tr></thead><tbody>\n${rows}\n</tbody></table>`;
}

function requestDetails(request: ApprovalRequest): string {
  const args = request.summary.map((item) => `<dt>${escapeHtml(item.name)}</dt><dd><pre>${escapeHtml(item.value)}</pre></dd>`).join('\n');
  const caller = request.requestedBy ? `${nameOf(request.requestedBy)} (${request.requestedBy.issuer})` : '(the route does not identify callers)';
  return `<dl>
<dt>tool</dt><dd id="tool">${escapeHtml(request.binding.tool)} <small>(called as ${escapeHtml(request.exposedTool)})</small></dd>
<dt>backend</dt><dd id="backend">${escapeHtml(request.binding.backend)}</dd>
<dt>route</dt><dd>${escapeHtml(request.binding.route)}</dd>
<dt>risk</dt><dd class="risk-${request.risk}" id="risk">${request.risk}</dd>
<dt>asked for by</dt><dd id="caller">${escapeHtml(caller)}</dd>
<dt>may decide</dt><dd>${escapeHtml(request.approvers ? `members of group "${request.approvers}"` : 'the caller themself')}</dd>
<dt>expires</dt><dd>${escapeHtml(request.expiresAt)}</dd>
</dl>
<h2>Arguments</h2>
<dl id="arguments">${args || '<dt>(none)</dt><dd></dd>'}</dl>`;
}

function decisionText(decision: Decision): string {
  const verb = decision.decision === 'granted' ? 'Approved' : 'Declined';
  const comment = decision.comment ? `: “${escapeHtml(decision.comment)}”` : '';
  return `<p id="decision">${verb} by ${escapeHtml(nameOf(decision.by))} at ${escapeHtml(decision.at)}${comment}.</p>`;
}

export interface ApprovalPagesOptions {
  store: ApprovalStore;
  signIn: ApproverSignIn;
  publicUrl: string;
  log: Logger;
}

export function approvalPages({ store, signIn, publicUrl, log }: ApprovalPagesOptions): express.Express {
  const secure = publicUrl.startsWith('https:');
  const callbackUrl = `${publicUrl}/approvals/callback`;
  const cookie = (name: string, value: string, maxAgeSeconds: number) =>
    serializeCookie(name, value, { httpOnly: true, sameSite: 'lax', secure, path: '/approvals', maxAge: maxAgeSeconds });

  const app = express();
  app.disable('x-powered-by');
  app.use((_req, res, next) => {
    // Nothing but this page's own form: no scripts, no framing (a decision must not be clickjacked).
    // The page's address (a grant's link) never leaves for another site, but its own form's POST carries
    // its Origin: with no-referrer a browser sends `Origin: null`, which the gateway's origin check refuses.
    res.set({
      'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
      'x-frame-options': 'DENY',
      'referrer-policy': 'same-origin',
      'cache-control': 'no-store',
    });
    next();
  });
  app.use(express.urlencoded({ extended: false, limit: '16kb' }));

  const send = (res: Response, status: number, title: string, body: string) => res.status(status).type('html').send(page(title, body));
  const approverOf = async (req: Request) => {
    const sessionId = parseCookies(req.headers.cookie ?? '')[APPROVER_COOKIE];
    return sessionId ? store.approver(sessionId) : undefined;
  };

  const startSignIn = async (res: Response, approvalId: string) => {
    const state = randomBytes(16).toString('base64url');
    const nonce = randomBytes(16).toString('base64url');
    const verifier = signIn.newVerifier();
    await store.startLogin(state, { verifier, nonce, approvalId });
    const target = await signIn.authorizationUrl(callbackUrl, state, nonce, verifier);
    res.setHeader('set-cookie', cookie(LOGIN_COOKIE, state, 600));
    res.redirect(303, target.href);
  };

  app.get('/approvals/callback', async (req, res) => {
    const state = typeof req.query.state === 'string' ? req.query.state : '';
    // The sign-in must come back to the browser that started it.
    if (!state || parseCookies(req.headers.cookie ?? '')[LOGIN_COOKIE] !== state) {
      return send(res, 400, 'Sign-in failed', '<p>This sign-in was not started in this browser, or it took too long. Open the approval link again.</p>');
    }
    const login = await store.finishLogin(state);
    if (!login) return send(res, 400, 'Sign-in failed', '<p>This sign-in has expired or was used already. Open the approval link again.</p>');
    let signedIn;
    try {
      signedIn = await signIn.finish(new URL(req.originalUrl, publicUrl), { state, nonce: login.nonce, verifier: login.verifier });
    } catch (error) {
      log.warn('an approver sign-in failed', { error: (error as Error).message });
      return send(res, 400, 'Sign-in failed', `<p>The identity provider's answer was not accepted: ${escapeHtml((error as Error).message)}</p>`);
    }
    const sessionId = randomBytes(24).toString('base64url');
    await store.saveApprover(sessionId, { ...signedIn, csrf: randomBytes(24).toString('base64url') });
    res.setHeader('set-cookie', [cookie(APPROVER_COOKIE, sessionId, Math.floor(store.settings.approverSessionMs / 1000)), cookie(LOGIN_COOKIE, '', 0)]);
    res.redirect(303, `/approvals/${login.approvalId}`);
  });

  app.get('/approvals/:id', async (req, res) => {
    const id = req.params.id;
    if (!APPROVAL_ID_PATTERN.test(id)) return send(res, 404, 'No such approval request', '<p>This link does not name an approval request.</p>');
    const approver = await approverOf(req);
    if (!approver) return startSignIn(res, id);
    const found = await store.get(id);
    if (!found) return send(res, 404, 'No such approval request', '<p>This approval request is unknown, or it expired long ago.</p>');
    const { request, decision } = found;
    const history = historyTable(await store.history(request.binding));
    const signedInAs = `<p>Signed in as <strong id="approver">${escapeHtml(nameOf(approver))}</strong>.</p>`;
    let action: string;
    if (decision) action = decisionText(decision);
    else if (Date.parse(request.expiresAt) <= Date.now()) action = '<p id="decision">This request expired without a decision.</p>';
    else if (!mayDecide(approver, request)) {
      action = `<p id="decision">You may not decide this request: it needs ${escapeHtml(request.approvers ? `a member of group "${request.approvers}"` : 'the caller themself')}.</p>`;
    } else {
      action = `<form method="post" action="/approvals/${id}">
<input type="hidden" name="csrf" value="${escapeHtml(approver.csrf)}">
<p><label for="comment">Comment (optional, kept with the decision)</label><br><textarea id="comment" name="comment" maxlength="${COMMENT_MAX}"></textarea></p>
<p><button type="submit" name="decision" value="approve" id="approve">Approve</button><button type="submit" name="decision" value="decline" id="decline">Decline</button></p>
</form>`;
    }
    send(res, 200, `Approve ${request.exposedTool}?`, `${signedInAs}\n${requestDetails(request)}\n<h2>Decision</h2>\n${action}\n<h2>Earlier decisions on this tool</h2>\n${history}`);
  });

  app.post('/approvals/:id', async (req, res) => {
    const id = req.params.id;
    const approver = await approverOf(req);
    if (!approver) return send(res, 401, 'Not signed in', '<p>Open the approval link again to sign in.</p>');
    const form = decisionForm.safeParse(req.body);
    if (!form.success || !sameSecret(form.data.csrf, approver.csrf)) return send(res, 400, 'Not accepted', '<p>The form was not accepted: open the approval link again.</p>');
    const found = APPROVAL_ID_PATTERN.test(id) ? await store.get(id) : undefined;
    if (!found) return send(res, 404, 'No such approval request', '<p>This approval request is unknown, or it expired long ago.</p>');
    const { request } = found;
    if (!mayDecide(approver, request)) return send(res, 403, 'Not yours to decide', '<p>You may not decide this request.</p>');
    const expiresAt = Date.parse(request.expiresAt);
    if (expiresAt <= Date.now()) return send(res, 409, 'Expired', '<p id="decision">This request expired without a decision.</p>');
    const by = { issuer: approver.issuer, subject: approver.subject, ...(approver.name ? { name: approver.name } : {}) };
    const granted = form.data.decision === 'approve';
    const comment = form.data.comment.trim();
    const decided = await store.decide(request, {
      decision: granted ? 'granted' : 'declined',
      by,
      at: new Date().toISOString(),
      ...(comment ? { comment } : {}),
      ...(granted ? { grant: signGrant(store.settings.key, { v: 1, id, binding: request.binding, exp: expiresAt, by }) } : {}),
    });
    log.info('approval decided', { id, decision: decided.decision, by: by.subject, route: request.binding.route, tool: request.binding.tool });
    const next = decided.decision === 'granted' ? 'The agent can now call the tool again with the same arguments, once.' : 'The agent is told that the call was declined.';
    send(res, 200, decided.decision === 'granted' ? 'Approved' : 'Declined', `${decisionText(decided)}\n<p>${next} You can close this page.</p>`);
  });

  // Redis unreachable, the identity provider down: a page that says so, never a stack trace.
  app.use((error: Error, _req: Request, res: Response, _next: express.NextFunction) => {
    log.error('an approval page failed', { error: error.message });
    send(res, 503, 'Approvals are unavailable', '<p>The gateway cannot reach what approvals need right now. Try again in a moment.</p>');
  });

  return app;
}
