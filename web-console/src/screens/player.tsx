/**
 * The player of a console recording (asciicast v2, GET /remote/recordings/{id}: its owner, or remote-access:manage on its device):
 * xterm.js replays the recorded output with its timing, with play/pause, a seek bar and 1x/2x/4x.
 * The terminal takes no input: it shows what the device's terminal printed, nothing more.
 */
import { Terminal } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';
import { useEffect, useRef, useState } from 'preact/hooks';
import { castDuration, castSize, parseCast, type CastEvent } from '../../../shared/asciicast.js';
import { api } from '../api.js';
import { Link } from '../router.js';
import { ErrorBox, Loading } from '../ui.js';

const SPEEDS = [1, 2, 4] as const;
const TICK_MS = 50;

/** Controls the terminal: shows the recording as of a time, forward by writing, backward by replaying. */
class Playback {
  private next = 0;
  position = 0;

  constructor(
    private readonly term: Terminal,
    private readonly events: CastEvent[],
    private readonly size: { cols: number; rows: number },
  ) {}

  /** Shows the recording as it was at `time` seconds. */
  seek(time: number): void {
    if (time < this.position) {
      this.term.reset();
      this.term.resize(this.size.cols, this.size.rows);
      this.next = 0;
    }
    let out = '';
    while (this.next < this.events.length && this.events[this.next][0] <= time) {
      const [, type, data] = this.events[this.next];
      if (type === 'o') out += data;
      else if (type === 'r') {
        const size = castSize(data);
        if (size) {
          if (out) this.term.write(out);
          out = '';
          this.term.resize(size.cols, size.rows);
        }
      }
      this.next += 1;
    }
    if (out) this.term.write(out);
    this.position = time;
  }
}

/** m:ss.t — tenths, as short recordings last less than a second. */
function clock(seconds: number): string {
  const tenths = Math.floor(seconds * 10);
  const s = Math.floor(tenths / 10);
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}.${tenths % 10}`;
}

function PlayerView({ sessionId, text }: { sessionId: string; text: string }) {
  const host = useRef<HTMLDivElement>(null);
  const playback = useRef<Playback | null>(null);
  const [error, setError] = useState<unknown>();
  const [duration, setDuration] = useState(0);
  const [position, setPosition] = useState(0);
  const [playing, setPlaying] = useState(true);
  const [speed, setSpeed] = useState<number>(1);

  useEffect(() => {
    if (!host.current) return;
    let cast: ReturnType<typeof parseCast>;
    try {
      cast = parseCast(text);
    } catch (err) {
      setError(err);
      return;
    }
    const size = { cols: cast.header.width, rows: cast.header.height };
    const term = new Terminal({
      cols: size.cols,
      rows: size.rows,
      disableStdin: true,
      cursorBlink: false,
      scrollback: 5000,
      fontSize: 14,
      lineHeight: 1.2,
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
      theme: { background: '#111418' },
    });
    term.open(host.current);
    playback.current = new Playback(term, cast.events, size);
    setDuration(castDuration(cast.events));
    return () => {
      playback.current = null;
      term.dispose();
    };
  }, [text]);

  useEffect(() => {
    if (!playing) return;
    let last = performance.now();
    const timer = setInterval(() => {
      const now = performance.now();
      const p = playback.current;
      if (!p) return;
      const to = Math.min(duration, p.position + ((now - last) / 1000) * speed);
      last = now;
      p.seek(to);
      setPosition(to);
      if (to >= duration) setPlaying(false);
    }, TICK_MS);
    return () => clearInterval(timer);
  }, [playing, speed, duration]);

  const seek = (time: number) => {
    playback.current?.seek(time);
    setPosition(time);
  };

  if (error) return <ErrorBox error={error} title="The recording could not be read" />;
  return (
    <div class="console-screen player-screen">
      <div class="console-bar">
        <Link href="/audit" class="button">
          ← Audit
        </Link>
        <span class="console-title">Recording {sessionId.slice(0, 8)}</span>
        <button
          type="button"
          class="button"
          data-testid="player-play"
          onClick={() => {
            if (!playing && position >= duration) seek(0);
            setPlaying(!playing);
          }}
        >
          {playing ? 'Pause' : 'Play'}
        </button>
        <input
          type="range"
          aria-label="Position"
          data-testid="player-seek"
          min={0}
          max={duration}
          step={0.1}
          value={position}
          onInput={(e) => seek(Number((e.target as HTMLInputElement).value))}
        />
        <span class="console-status" data-testid="player-time" role="status">
          {clock(position)} / {clock(duration)}
        </span>
        <span role="group" aria-label="Speed">
          {SPEEDS.map((s) => (
            <button key={s} type="button" class="button" aria-pressed={speed === s} data-testid={`player-speed-${s}`} onClick={() => setSpeed(s)}>
              {s}x
            </button>
          ))}
        </span>
      </div>
      <div class="terminal-host" ref={host} data-testid="player-terminal" />
    </div>
  );
}

export function PlayerScreen({ sessionId }: { sessionId: string }) {
  const [state, setState] = useState<{ text?: string; error?: unknown }>({});
  useEffect(() => {
    document.title = 'Recording · Fleet console';
    let live = true;
    api.get<string>(`/remote/recordings/${encodeURIComponent(sessionId)}`).then(
      (text) => live && setState({ text: typeof text === 'string' ? text : JSON.stringify(text) }),
      (error) => live && setState({ error }),
    );
    return () => {
      live = false;
    };
  }, [sessionId]);
  if (state.text !== undefined) return <PlayerView sessionId={sessionId} text={state.text} />;
  return (
    <div class="console-page">
      <p>
        <Link href="/audit">← Back to the audit log</Link>
      </p>
      {state.error ? <ErrorBox error={state.error} /> : <Loading what="the recording" />}
    </div>
  );
}
