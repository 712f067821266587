// @ts-check
// The operator dashboard's script: reads /dashboard/data every few seconds and draws the page, the
// charts as inline SVG. Plain JavaScript served as is (no build step), type-checked against the
// server's own types (control-plane/admin/dashboard.ts) by test/unit/dashboard-script.test.ts.
'use strict';

/**
 * @typedef {import('../dashboard').DashboardData} DashboardData
 * @typedef {DashboardData['summary']} Summary
 * @typedef {DashboardData['history']} History
 * @typedef {History['series'][number]} Series
 * @typedef {History['notable'][number]} NotableCall
 */

(() => {
  const DATA_URL = '/dashboard/data';
  const SVG = 'http://www.w3.org/2000/svg';
  const CHART = { width: 180, height: 34 };

  /** @type {number} */
  let refreshSeconds = 5;
  /** @type {number | undefined} */
  let failingSince;

  /**
   * An element with text or children; data never reaches innerHTML.
   * @param {string} tag
   * @param {Record<string, string>} [attributes]
   * @param {(Node | string)[]} children
   */
  function element(tag, attributes = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
    node.append(...children);
    return node;
  }

  /** @param {string} selector */
  function required(selector) {
    const node = document.querySelector(selector);
    if (!node) throw new Error(`the page has no ${selector}`);
    return node;
  }

  /** @param {number} value */
  const rate = (value) => (value >= 10 ? value.toFixed(0) : value >= 0.1 ? value.toFixed(2) : value.toFixed(3));
  /** @param {number | null} value */
  const percent = (value) => (value === null ? '–' : `${(value * 100).toFixed(value > 0 && value < 0.01 ? 2 : 1)} %`);
  /** @param {number | null} value */
  const millis = (value) => (value === null ? '–' : value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${value.toFixed(value < 10 ? 1 : 0)} ms`);
  /** @param {string | undefined} iso */
  function since(iso) {
    if (!iso) return '';
    const seconds = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
    const ago = seconds < 120 ? `${seconds} s` : seconds < 7200 ? `${Math.round(seconds / 60)} min` : `${Math.round(seconds / 3600)} h`;
    return `${new Date(iso).toLocaleTimeString()} (${ago} ago)`;
  }

  /**
   * A small chart over the hour, one slot per step: bars, or lines broken where a value is null (a
   * value alone between gaps is a dot). The peak is written in its corner.
   * @param {{ values: (number | null)[], className: string }[]} series
   * @param {'bars' | 'lines'} kind
   * @param {string} peakLabel
   * @param {string} title what a hover shows
   */
  function chart(series, kind, peakLabel, title) {
    /** @param {string} tag @param {Record<string, string>} attributes */
    const svgElement = (tag, attributes) => {
      const node = document.createElementNS(SVG, tag);
      for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
      return node;
    };
    const svg = svgElement('svg', { class: 'chart', width: String(CHART.width), height: String(CHART.height), viewBox: `0 0 ${CHART.width} ${CHART.height}` });
    const hover = svgElement('title', {});
    hover.textContent = title;
    svg.append(hover);
    const top = Math.max(...series.flatMap((line) => line.values.filter((value) => value !== null)), Number.MIN_VALUE);
    const plotTop = 11;
    /** @param {number} value */
    const yOf = (value) => CHART.height - 1 - (value / top) * (CHART.height - 1 - plotTop);
    for (const line of series) {
      const slot = CHART.width / line.values.length;
      /** @param {number} index */
      const xOf = (index) => (index + 0.5) * slot;
      let d = '';
      line.values.forEach((value, index) => {
        if (value === null || (kind === 'bars' && value === 0)) return;
        if (kind === 'bars') {
          svg.append(svgElement('rect', { class: line.className, x: (index * slot).toFixed(2), width: Math.max(slot, 1).toFixed(2), y: yOf(value).toFixed(1), height: (CHART.height - 1 - yOf(value)).toFixed(1) }));
          return;
        }
        const joined = index > 0 && line.values[index - 1] !== null;
        const alone = !joined && (index === line.values.length - 1 || line.values[index + 1] === null);
        if (alone) svg.append(svgElement('circle', { class: line.className, cx: xOf(index).toFixed(1), cy: yOf(value).toFixed(1), r: '1.8' }));
        else d += `${joined ? 'L' : 'M'}${xOf(index).toFixed(1)},${yOf(value).toFixed(1)}`;
      });
      if (d) svg.append(svgElement('path', { class: line.className, d }));
    }
    const peak = svgElement('text', { class: 'peak', x: '2', y: '9' });
    peak.textContent = peakLabel;
    svg.append(peak);
    return svg;
  }

  /**
   * The hour of one series, one value per step.
   * @param {Series} series
   * @param {History} history
   */
  function hourOf(series, history) {
    /** @type {(number | null)[]} */
    const callsPerSecond = new Array(history.steps).fill(0);
    /** @type {(number | null)[]} */
    const errorRatio = new Array(history.steps).fill(null);
    /** @type {(number | null)[]} */
    const p50 = new Array(history.steps).fill(null);
    /** @type {(number | null)[]} */
    const p99 = new Array(history.steps).fill(null);
    for (const [step, calls, backendCalls, errors, p50Ms, p99Ms] of series.points) {
      callsPerSecond[step] = calls / history.stepSeconds;
      errorRatio[step] = backendCalls > 0 ? errors / backendCalls : null;
      p50[step] = p50Ms;
      p99[step] = p99Ms;
    }
    return { callsPerSecond, errorRatio, p50, p99 };
  }

  /** @param {(number | null)[]} values */
  const peak = (values) => Math.max(0, ...values.filter((value) => value !== null));

  /** @param {Summary} summary */
  function renderSummary(summary) {
    /** @type {[string, number, boolean][]} */
    const cards = [
      ['routes', summary.routes, false],
      ['Tool Services', summary.toolServices, false],
      ['tools served', summary.exposedTools, false],
      ['Envoys connected', summary.envoys, summary.envoys === 0],
      ['Envoys rejecting config', summary.envoysRejecting, summary.envoysRejecting > 0],
      ['rejected routes', summary.rejectedRoutes, summary.rejectedRoutes > 0],
    ];
    const nodes = cards.map(([label, value, alert]) =>
      element('div', { class: alert ? 'card alert' : 'card', 'data-card': label }, element('div', { class: 'value' }, String(value)), element('div', { class: 'label' }, label)),
    );
    if (summary.registryError) nodes.push(element('div', { class: 'card alert', 'data-card': 'registry' }, element('div', { class: 'label' }, `registry document refused: ${summary.registryError}`)));
    required('#summary').replaceChildren(...nodes);
  }

  /** @param {DashboardData['routes']} routes */
  function renderRoutes(routes) {
    const rows = routes.flatMap((route) =>
      route.backends.map((backend, index) =>
        element(
          'tr',
          { 'data-route': route.route, 'data-backend': backend.name, 'data-state': backend.state },
          element('td', {}, index === 0 ? `${route.route} (${route.exposedTools} tools)` : ''),
          element('td', {}, backend.name),
          element('td', { title: `Envoy cluster ${backend.cluster}` }, backend.toolService),
          element('td', {}, element('span', { class: `state ${backend.state}` }, backend.state)),
          element('td', {}, backend.state === 'ok' ? (backend.lastListedAt ? `listed ${since(backend.lastListedAt)}` : '') : since(backend.since)),
          element('td', { class: 'number' }, `${backend.exposedTools} / ${backend.tools}${backend.deniedTools ? ` (${backend.deniedTools} denied)` : ''}`),
          element('td', { class: 'error-text' }, backend.lastError ?? ''),
        ),
      ),
    );
    required('#routes tbody').replaceChildren(...rows);
  }

  /** @param {History} history */
  function renderTools(history) {
    const rows = history.series.map((series) => {
      const hour = hourOf(series, history);
      const { recent } = series;
      return element(
        'tr',
        { 'data-route': series.route, 'data-backend': series.backend, 'data-tool': series.tool },
        element('td', {}, series.route),
        element('td', {}, series.backend),
        element('td', {}, series.tool),
        element('td', { class: 'number calls' }, String(recent.calls)),
        element('td', { class: 'number rate' }, rate(recent.callsPerSecond)),
        element('td', { class: 'number error-ratio' }, percent(recent.errorRatio)),
        element('td', { class: 'number p50' }, millis(recent.p50Ms)),
        element('td', { class: 'number p99' }, millis(recent.p99Ms)),
        element('td', { class: 'chart-rate' }, chart([{ values: hour.callsPerSecond, className: 'calls' }], 'bars', `${rate(peak(hour.callsPerSecond))}/s`, 'calls per second, per 10 s')),
        element('td', { class: 'chart-errors' }, chart([{ values: hour.errorRatio, className: 'errors' }], 'bars', percent(peak(hour.errorRatio)), 'error ratio, per 10 s')),
        element(
          'td',
          { class: 'chart-latency' },
          chart(
            [
              { values: hour.p50, className: 'p50' },
              { values: hour.p99, className: 'p99' },
            ],
            'lines',
            millis(peak(hour.p99)),
            'p50 (grey) and p99 (purple) latency, per 10 s',
          ),
        ),
      );
    });
    required('#tools tbody').replaceChildren(...rows);
    /** @type {HTMLElement} */ (required('#tools-empty')).hidden = rows.length > 0;
  }

  /** @param {NotableCall[]} notable */
  function renderNotable(notable) {
    const rows = notable.map((call) =>
      element(
        'tr',
        { 'data-outcome': call.outcome, 'data-tool': call.tool },
        element('td', {}, new Date(call.at).toLocaleTimeString()),
        element('td', {}, call.route),
        element('td', {}, call.backend),
        element('td', {}, call.tool),
        element('td', { class: `outcome-${call.outcome}` }, call.outcome === 'degraded' ? 'fallback served' : call.outcome),
        element('td', { class: 'number' }, String(call.attempts)),
        element('td', { class: 'number' }, millis(call.ms)),
        element('td', { class: 'error-text' }, call.rule ? `policy: ${call.rule}` : call.detail),
      ),
    );
    required('#notable tbody').replaceChildren(...rows);
    /** @type {HTMLElement} */ (required('#notable-empty')).hidden = rows.length > 0;
  }

  /** @param {DashboardData} data */
  function render(data) {
    renderSummary(data.summary);
    renderRoutes(data.routes);
    renderTools(data.history);
    renderNotable(data.history.notable);
  }

  async function refresh() {
    const freshness = required('#freshness');
    try {
      const response = await fetch(DATA_URL, { cache: 'no-store' });
      if (!response.ok) throw new Error(`the control plane answered ${response.status}`);
      /** @type {DashboardData} */
      const data = await response.json();
      render(data);
      refreshSeconds = data.refreshSeconds;
      failingSince = undefined;
      freshness.classList.remove('error');
      freshness.textContent = `updated ${new Date(data.generatedAt).toLocaleTimeString()}, again every ${refreshSeconds} s`;
      freshness.setAttribute('data-generated-at', data.generatedAt);
    } catch (error) {
      failingSince ??= Date.now();
      freshness.classList.add('error');
      freshness.textContent = `cannot read the control plane since ${new Date(failingSince).toLocaleTimeString()} (${String(error)}); showing the last data`;
    } finally {
      setTimeout(refresh, refreshSeconds * 1000);
    }
  }

  void refresh();
})();
