/**
 * A time chart drawn by uPlot (a small canvas charting library; its stylesheet is bundled with this
 * module). The legend shows each series' newest value, and the value under the pointer while it is
 * over the chart. This module loads with the screens that draw charts, not with the console.
 */
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import './charts.css';
import { formatValue, latest, xAxisRange, type ChartData } from './metrics-charts.js';

const COLORS = ['#2f6fde', '#c62f2f', '#1e8a4c', '#a8650b', '#7b3fc4', '#0f8a8a', '#d04a9a', '#5d6675'];

export function TimeChart({ chart, height = 200 }: { chart: ChartData; height?: number }) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = box.current;
    if (!el || chart.xs.length === 0) return;
    const width = Math.max(200, el.clientWidth);
    const span = chart.span && xAxisRange(chart.xs, chart.span);
    const plot = new uPlot(
      {
        width,
        height,
        series: [
          {},
          ...chart.series.map((s, i) => ({
            label: s.name,
            stroke: COLORS[i % COLORS.length],
            width: 1.5,
            spanGaps: false,
            points: { show: chart.xs.length < 50 },
            // Without the pointer over the chart (idx null), the newest value.
            value: (_u: uPlot, v: number | null, _s: number, idx: number | null) => formatValue(idx === null ? latest(s.values) : v, chart.unit),
          })),
        ],
        axes: [{}, { size: 86, values: (_u: uPlot, splits: number[]) => splits.map((v) => formatValue(v, chart.unit)) }],
        scales: {
          // The chosen range, not uPlot's padding around the samples (one sample spanned years).
          x: span ? { time: true, range: () => span } : { time: true },
          y: chart.unit === 'percent' ? { range: [0, 100] } : {},
        },
        legend: { live: true },
        hooks: {
          // What the time axis shows (Unix seconds), for tests and for whoever inspects the page.
          setScale: [
            (u: uPlot, key: string) => {
              if (key !== 'x') return;
              el.dataset.xMin = String(u.scales.x.min);
              el.dataset.xMax = String(u.scales.x.max);
            },
          ],
        },
      },
      [chart.xs, ...chart.series.map((s) => s.values)] as uPlot.AlignedData,
      el,
    );
    const resize = new ResizeObserver(() => {
      const w = Math.max(200, el.clientWidth);
      if (w !== plot.width) plot.setSize({ width: w, height });
    });
    resize.observe(el);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [chart, height]);
  return (
    <figure class="chart" data-testid={`chart-${chart.key}`}>
      <figcaption>{chart.title}</figcaption>
      {chart.xs.length === 0 ? <p class="muted">No samples in this range.</p> : <div ref={box} class="chart-box" />}
    </figure>
  );
}
