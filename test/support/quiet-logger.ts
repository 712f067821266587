import { Logger } from '../../control-plane/shared/log';

/** A logger that says nothing, for unit tests of code that logs. */
export const quietLogger: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };
