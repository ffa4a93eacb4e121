// The lab entry point, a thin adapter: the Runs and Workers panels in the left sidebar, a
// command for each (and one to open a run's detail), the toast on load that counts runs in
// progress; the graph viewer (file type `*.codefy.json`, Open with → Codefy graph for any JSON),
// Queue on… (viewer toolbar, file browser context menu, palette), New sweep, the sweep view,
// the Studies panel and a study's view; a palette command for every panel and dialog (those that
// open one run, sweep or study ask for its id); the preferences of the Settings Editor
// (schema/panels.json) read through ISettingRegistry. Everything else lives in the modules it wires.

import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, InputDialog, MainAreaWidget, Notification, WidgetTracker } from '@jupyterlab/apputils';
import { DocumentWidget } from '@jupyterlab/docregistry';
import { IFileBrowserFactory } from '@jupyterlab/filebrowser';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import { LabIcon } from '@jupyterlab/ui-components';

import { CodefyApi } from './api';
import { FACTORY, FILE_TYPE, GraphViewer, GraphViewerFactory } from './graphViewer';
import { queueOn } from './queueDialog';
import { RunDetail } from './runDetail';
import { RunsPanel } from './runsPanel';
import { DEFAULT_PREFERENCES, Preferences, readPreferences } from './settings';
import { StudiesPanel, StudyView } from './studies';
import { newSweep } from './sweepDialog';
import { SweepView } from './sweepView';
import { WorkersPanel } from './workersPanel';

export const PLUGIN_ID = 'codefy-jupyter:panels';
export const COMMANDS = {
  openRuns: 'codefy:open-runs',
  openRunsWide: 'codefy:open-runs-wide',
  openWorkers: 'codefy:open-workers',
  openRun: 'codefy:open-run',
  queueOn: 'codefy:queue-on',
  runGraph: 'codefy:run-graph',
  newSweep: 'codefy:new-sweep',
  openSweep: 'codefy:open-sweep',
  openStudies: 'codefy:open-studies',
  openStudy: 'codefy:open-study'
};

// A play mark beside a queue: the Table of Contents already uses a plain list icon.
const runsIcon = new LabIcon({
  name: 'codefy-jupyter:runs',
  svgstr: '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
    '<path d="M3 4.5v7l6-3.5zM11 6h10v2H11zM11 11h10v2H11zM3 16h18v2H3zM3 20h12v2H3z"/></g></svg>'
});
const workersIcon = new LabIcon({
  name: 'codefy-jupyter:workers',
  svgstr: '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
    '<path d="M4 3h16v6H4zm2 2v2h2V5zM4 11h16v6H4zm2 2v2h2v-2zm3 6h6v2H9z"/></g></svg>'
});

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Runs and Workers panels of the codefy run queue',
  autoStart: true,
  optional: [ITranslator, ILayoutRestorer, ICommandPalette, IFileBrowserFactory, ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    translator: ITranslator | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    browsers: IFileBrowserFactory | null,
    settings: ISettingRegistry | null
  ) => {
    const trans = (translator ?? nullTranslator).load('codefy_jupyter');
    const api = new CodefyApi(app.serviceManager.serverSettings);
    let preferences: Preferences = DEFAULT_PREFERENCES;

    /** Run `open` with the id of the command's args, or one the user types (from the palette);
     * any unique prefix of 8 or more characters is accepted by the server. */
    const withId = async (given: unknown, title: string, open: (id: string) => void): Promise<void> => {
      let id = typeof given === 'string' ? given.trim() : '';
      if (!id) {
        const answer = await InputDialog.getText({ title, label: trans.__('Id (8 or more characters)') });
        id = answer.button.accept && answer.value ? answer.value.trim() : '';
      }
      if (id) {
        open(id);
      }
    };
    /** Show the main-area widget `id`, making it with `make` the first time. */
    const openMain = (id: string, make: () => MainAreaWidget): void => {
      const existing = Array.from(app.shell.widgets('main')).find(w => w.id === id);
      if (existing) {
        app.shell.activateById(existing.id);
        return;
      }
      const widget = make();
      widget.id = id;
      widget.title.icon = runsIcon;
      widget.title.closable = true;
      widget.content.title.changed.connect(() => {
        widget.title.label = widget.content.title.label;
      });
      widget.title.label = widget.content.title.label;
      app.shell.add(widget, 'main');
      app.shell.activateById(widget.id);
    };
    const openSweep = (id: string): void =>
      openMain(`codefy-sweep-${id}`, () => new MainAreaWidget({ content: new SweepView(api, trans, id, openRun) }));
    const openStudy = (id: string): void =>
      openMain(`codefy-study-${id}`, () => new MainAreaWidget({ content: new StudyView(api, trans, id, openRun) }));
    const openStudies = (): void =>
      openMain('codefy-studies-main', () => new MainAreaWidget({ content: new StudiesPanel(api, trans, openStudy) }));
    function openRun(id: string): void {
      openMain(`codefy-run-${id}`, () => new MainAreaWidget({
        content: new RunDetail(api, trans, id, { openSweep, openStudy })
      }));
    }

    // The graph viewer and what acts on a graph: the viewer's toolbar, Queue on… from the file
    // browser or the palette (the current viewer, else the selected file), New sweep.
    const viewers = new WidgetTracker<DocumentWidget<GraphViewer>>({ namespace: 'codefy-graph' });
    const queueViewer = async (viewer: GraphViewer): Promise<void> => {
      if (!viewer.graph) {
        return;
      }
      const run = await queueOn(api, trans, viewer.graph, viewer.name, body => viewer.markRefused(body),
        preferences.defaultTarget);
      if (run) {
        viewer.watch(run);
        Notification.success(trans.__('Queued run %1', run.id.slice(0, 12)), { autoClose: 4000 });
      }
    };
    const sweepViewer = async (viewer: GraphViewer): Promise<void> => {
      if (!viewer.graph) {
        return;
      }
      // The Runs panel's listed runs: the objective suggestions come from what they recorded.
      const id = await newSweep(api, trans, viewer.graph, viewer.name, runs.runs);
      if (id) {
        openSweep(id);
      }
    };
    app.docRegistry.addFileType({
      name: FILE_TYPE,
      displayName: trans.__('Codefy graph'),
      extensions: ['.codefy.json'],
      mimeTypes: ['application/json'],
      fileFormat: 'text',
      contentType: 'file',
      icon: runsIcon
    });
    const factory = new GraphViewerFactory({
      name: FACTORY,
      label: trans.__('Codefy graph'),
      fileTypes: [FILE_TYPE, 'json'],
      defaultFor: [FILE_TYPE],
      modelName: 'text',
      translator: translator ?? nullTranslator
    }, api, trans, { queueOn: v => void queueViewer(v), newSweep: v => void sweepViewer(v), openRun });
    factory.widgetCreated.connect((_, widget) => {
      widget.title.icon = runsIcon;
      void viewers.add(widget);
      widget.context.pathChanged.connect(() => void viewers.save(widget));
    });
    app.docRegistry.addWidgetFactory(factory);
    restorer?.restore(viewers, {
      command: 'docmanager:open',
      args: widget => ({ path: widget.context.path, factory: FACTORY }),
      name: widget => widget.context.path
    });

    const selectedJson = (): string | null => {
      const first = browsers?.tracker.currentWidget?.selectedItems().next();
      const model = first && !first.done ? first.value : null;
      return model && model.path.endsWith('.json') ? model.path : null;
    };
    const currentViewer = (): GraphViewer | null => {
      const current = app.shell.currentWidget;
      return current && viewers.has(current) ? (current as DocumentWidget<GraphViewer>).content : viewers.currentWidget?.content ?? null;
    };
    const openViewer = async (path: string): Promise<GraphViewer> => {
      const widget = (await app.commands.execute('docmanager:open', { path, factory: FACTORY })) as DocumentWidget<GraphViewer>;
      await widget.context.ready;
      return widget.content;
    };

    app.commands.addCommand(COMMANDS.queueOn, {
      label: trans.__('Queue on…'),
      caption: trans.__('Queue a graph on this server, a worker or any available'),
      execute: async args => {
        const path = typeof args.path === 'string' ? args.path : args.fromBrowser ? selectedJson() : null;
        const viewer = path ? await openViewer(path) : currentViewer() ?? (selectedJson() ? await openViewer(selectedJson()!) : null);
        if (!viewer) {
          Notification.warning(trans.__('Open a graph (a .codefy.json file, or Open with → Codefy graph) first'));
          return;
        }
        if (!viewer.graph) {
          Notification.error(trans.__('%1 is not a graph', viewer.name));
          return;
        }
        await queueViewer(viewer);
      }
    });
    app.commands.addCommand(COMMANDS.runGraph, {
      label: trans.__('Run Graph Now'),
      caption: trans.__('Run the open graph on this server (interactive lane)'),
      isEnabled: () => currentViewer() !== null,
      execute: () => currentViewer()?.runInteractive()
    });
    app.commands.addCommand(COMMANDS.newSweep, {
      label: trans.__('New Sweep…'),
      caption: trans.__('Sweep parameters of the open graph'),
      execute: async () => {
        const viewer = currentViewer();
        if (!viewer) {
          Notification.warning(trans.__('Open a graph (a .codefy.json file, or Open with → Codefy graph) first'));
          return;
        }
        await sweepViewer(viewer);
      }
    });
    app.commands.addCommand(COMMANDS.openSweep, {
      label: args => (args.id ? trans.__('Open Sweep') : trans.__('Open Sweep by Id…')),
      execute: async args => withId(args.id, trans.__('Open sweep'), openSweep)
    });
    app.commands.addCommand(COMMANDS.openStudies, {
      label: trans.__('Show Studies'),
      caption: trans.__('Every study on this server'),
      execute: () => openStudies()
    });
    app.commands.addCommand(COMMANDS.openStudy, {
      label: args => (args.id ? trans.__('Open Study') : trans.__('Open Study by Id…')),
      execute: async args => withId(args.id, trans.__('Open study'), openStudy)
    });
    // One item per file type: a context-menu selector cannot hold a list.
    for (const type of ['json', FILE_TYPE]) {
      app.contextMenu.addItem({
        command: COMMANDS.queueOn,
        args: { fromBrowser: true },
        selector: `.jp-DirListing-item[data-file-type="${type}"]`,
        rank: 60
      });
    }

    const runs = new RunsPanel({
      api, trans, openRun, openStudies,
      newSweep: () => void app.commands.execute(COMMANDS.newSweep),
      openWide: () => void app.commands.execute(COMMANDS.openRunsWide)
    });
    // The same panel as a main-area tab: every column (one tab; a second call shows it).
    let wide: RunsPanel | null = null;
    const openRunsWide = async (): Promise<void> => {
      if (!wide || wide.isDisposed) {
        wide = new RunsPanel({ api, trans, openRun, openStudies, wide: true });
        wide.title.label = trans.__('Runs');
        wide.title.icon = runsIcon;
        wide.title.closable = true;
        app.shell.add(wide, 'main');
        await wide.start();
      }
      app.shell.activateById(wide.id);
    };
    runs.title.icon = runsIcon;
    runs.title.caption = trans.__('Runs');
    const workers = new WorkersPanel(api, trans);
    workers.title.icon = workersIcon;
    workers.title.caption = trans.__('Workers');
    app.shell.add(runs, 'left', { rank: 600 });
    app.shell.add(workers, 'left', { rank: 601 });
    restorer?.add(runs, runs.id);
    restorer?.add(workers, workers.id);

    app.commands.addCommand(COMMANDS.openRuns, {
      label: trans.__('Show Runs'),
      caption: trans.__('The runs this server owns, live'),
      execute: () => app.shell.activateById(runs.id)
    });
    app.commands.addCommand(COMMANDS.openRunsWide, {
      label: trans.__('Open Runs in Main Area'),
      caption: trans.__('The Runs panel with every column, as a main-area tab'),
      execute: () => openRunsWide()
    });
    app.commands.addCommand(COMMANDS.openWorkers, {
      label: trans.__('Show Workers'),
      caption: trans.__('Worker agents, their devices and slots'),
      execute: () => app.shell.activateById(workers.id)
    });
    app.commands.addCommand(COMMANDS.openRun, {
      label: args => (args.id ? trans.__('Open Run Detail') : trans.__('Open Run by Id…')),
      execute: async args => withId(args.id, trans.__('Open run'), openRun)
    });
    const category = trans.__('Codefy');
    palette?.addItem({ command: COMMANDS.openRuns, category });
    palette?.addItem({ command: COMMANDS.openRunsWide, category });
    palette?.addItem({ command: COMMANDS.openWorkers, category });
    for (const command of [COMMANDS.queueOn, COMMANDS.runGraph, COMMANDS.newSweep, COMMANDS.openStudies,
      COMMANDS.openRun, COMMANDS.openSweep, COMMANDS.openStudy]) {
      palette?.addItem({ command, category });
    }

    if (settings) {
      void settings.load(PLUGIN_ID).then(loaded => {
        const apply = (): void => {
          preferences = readPreferences(loaded.composite as Record<string, unknown>);
          workers.refreshSeconds = preferences.refreshSeconds;
        };
        apply();
        loaded.changed.connect(apply);
      }).catch(() => undefined);  // no schema (a dev build without it): the defaults stand
    }

    void app.restored.then(async () => {
      void workers.start();
      await runs.start();
      try {
        const page = await api.json<{ total: number }>(`${api.url('runs')}?status=queued,running,disconnected&limit=1`);
        if (page.total > 0) {
          Notification.info(
            page.total === 1 ? trans.__('1 run is in progress') : trans.__('%1 runs are in progress', page.total),
            {
              autoClose: 8000,
              actions: [{ label: trans.__('Show Runs'), callback: () => app.shell.activateById(runs.id) }]
            }
          );
        }
      } catch {
        // the panel shows the server's refusal itself
      }
    });
  }
};

export default plugin;
