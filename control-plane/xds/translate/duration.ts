/** Milliseconds as a proto3 JSON duration ("2s", "0.250s"). */
export function duration(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${(ms / 1000).toFixed(3)}s`;
}
