import { consoleSettings as settings } from '../../shared/api-types/console-settings.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import type { Config } from '../environment.js';

/** What the web console needs to know of this broker's settings; nothing secret. */
/** What the web console's settings route uses: the map settings. */
export interface WebConsoleRouteDeps {
  config: Pick<Config, 'mapTileUrl' | 'mapTileAttribution'>;
}

export const webConsoleRoutes: RouteSpec<WebConsoleRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/webconsole/settings',
    tag: 'web-console',
    summary: "Settings of this broker's web console",
    description:
      '`map.tile_url`: where the Map screen loads its tiles from (the MAP_TILE_URL setting), or null: the map then shows a bundled world outline and loads nothing from elsewhere; ' +
      '`map.attribution`: the credit shown on the map. Any signed-in user may read it.',
    access: 'authenticated',
    response: settings,
    handler: async ({ deps }) => ({ map: { tile_url: deps.config.mapTileUrl ?? null, attribution: deps.config.mapTileAttribution } }),
  }),
];
