import { CallFrames, whereLateFramesSit } from '../../bench/scenarios/streaming';

/**
 * The streaming scenario's account of where a path's slowest later frames sit (bench/scenarios/streaming.ts):
 * among their own call's last frames, or beside another call's start. Ten calls of 20 frames, 50 ms
 * apart: 190 later frames, of which the slowest 1 % are two.
 */
describe('whereLateFramesSit', () => {
  const NOTIFICATIONS = 20;
  const callStartingAt = (startedMs: number, delayOf: (progress: number) => number = () => 0.2): CallFrames => ({
    startedMs,
    first: [0.2],
    requestToFirst: [50],
    later: Array.from({ length: NOTIFICATIONS - 1 }, (_, index) => index + 2).map((progress) => ({ progress, sentMs: startedMs + 50 * progress, delayMs: delayOf(progress) })),
  });

  it("tells a call's last frames from frames beside another call's start", () => {
    const calls = Array.from({ length: 10 }, (_, index) => callStartingAt(index * 2));
    // Held while another call started: call 0's frame 2 (sent at 100 ms), call 5 starting at 105 ms.
    calls[0] = callStartingAt(0, (progress) => (progress === 2 ? 9 : 0.2));
    calls[5] = callStartingAt(105);
    // A call's own last frame, late where no call starts (sent at 18 + 1,000 ms).
    calls[9] = callStartingAt(18, (progress) => (progress === NOTIFICATIONS ? 7 : 0.2));
    expect(whereLateFramesSit(calls, NOTIFICATIONS)).toEqual({ late: 2, atOwnCallEnd: 1, nearAnotherCallStart: 1 });
  });

  it("does not take a call's own start for another's", () => {
    const lone = callStartingAt(0, (progress) => (progress === 2 ? 9 : 0.2));
    lone.startedMs = 100;
    const others = Array.from({ length: 9 }, (_, index) => callStartingAt(1_000 + index, (progress) => (index === 0 && progress === 10 ? 5 : 0.2)));
    expect(whereLateFramesSit([lone, ...others], NOTIFICATIONS)).toEqual({ late: 2, atOwnCallEnd: 0, nearAnotherCallStart: 0 });
  });
});
