import { createHash, timingSafeEqual } from 'node:crypto';
import * as fs from 'node:fs';
import type { NextFunction, Request, Response } from 'express';

/**
 * Who may use an admin port (docs/adr/0017-closed-inside.md). Bound to loopback, anyone on the host
 * may: the host is the boundary. Bound anywhere else, every request needs the bearer token read from
 * a file, except the probes' health paths (kubelets send no token); they answer their status alone.
 */

/** A bearer token from a file (a mounted Secret), without surrounding whitespace; too short to be one is an error. */
export function readToken(file: string): string {
  const token = fs.readFileSync(file, 'utf8').trim();
  if (token.length < 16) throw new Error(`the token in ${file} is shorter than 16 characters`);
  return token;
}

/** A bearer token kept in a file (a mounted Secret): read again whenever the file changes. */
export class TokenFile {
  private token: Buffer;
  private readAt: number;

  constructor(private readonly file: string) {
    this.token = TokenFile.read(file);
    this.readAt = fs.statSync(file).mtimeMs;
  }

  private static read(file: string): Buffer {
    return createHash('sha256').update(readToken(file)).digest();
  }

  /** Whether `presented` is the token now in the file (compared in constant time). */
  matches(presented: string): boolean {
    try {
      const changedAt = fs.statSync(this.file).mtimeMs;
      if (changedAt !== this.readAt) {
        this.token = TokenFile.read(this.file);
        this.readAt = changedAt;
      }
    } catch {
      // A file being replaced, or gone: the token read last stays valid until a new one is readable.
    }
    return timingSafeEqual(createHash('sha256').update(presented).digest(), this.token);
  }
}

/** Paths that answer without a token: the probes' (their status only, never detail). */
export const OPEN_HEALTH_PATHS = new Set(['/healthz', '/readyz']);

/** Set on `res.locals` by the middleware: whether the caller may see everything. */
export const AUTHENTICATED = 'adminAuthenticated';

/**
 * Express middleware of an admin port: with a token file, a request without `Authorization: Bearer
 * <token>` gets 401 (health paths excepted); without one (a loopback bind) every request passes.
 */
export function adminAccess(tokenFile: TokenFile | undefined) {
  return (req: Request, res: Response, next: NextFunction) => {
    const header = req.headers.authorization;
    const authenticated = !tokenFile || (header !== undefined && header.startsWith('Bearer ') && tokenFile.matches(header.slice('Bearer '.length).trim()));
    res.locals[AUTHENTICATED] = authenticated;
    if (authenticated || (req.method === 'GET' && OPEN_HEALTH_PATHS.has(req.path))) {
      next();
      return;
    }
    res.status(401).set('www-authenticate', 'Bearer realm="mcpgw-admin"').json({ error: 'this admin port needs Authorization: Bearer <the token of --admin-token-file>' });
  };
}
