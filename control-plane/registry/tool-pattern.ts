/** A tool pattern of the registry (policies, tool limits): `*` matches any characters, everything else itself. */
export function patternMatches(pattern: string, name: string): boolean {
  const expression = pattern
    .split('*')
    .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
    .join('.*');
  return new RegExp(`^${expression}$`, 's').test(name);
}
